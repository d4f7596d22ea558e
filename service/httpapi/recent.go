package httpapi

import (
	"encoding/json"
	"slices"
	"sync"
	"time"
)

// recentSessions remembers the sessions this handler touched last, for the
// dashboard's list of recent sessions.
type recentSessions struct {
	mu    sync.Mutex
	max   int
	items map[sessionRef]time.Time
}

type sessionRef struct{ App, User, ID string }

// recentJSON is one row of the dashboard's session lists.
type recentJSON struct {
	AppName        string          `json:"appName"`
	UserID         string          `json:"userId"`
	ID             string          `json:"id"`
	LastUpdateTime json.RawMessage `json:"lastUpdateTime"`
}

func newRecentSessions(max int) *recentSessions {
	return &recentSessions{max: max, items: map[sessionRef]time.Time{}}
}

func (r *recentSessions) touch(app, user, id string, t time.Time) {
	ref := sessionRef{app, user, id}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.items[ref] = t
	if len(r.items) <= r.max {
		return
	}
	var oldest sessionRef
	first := true
	for k, v := range r.items {
		if first || v.Before(r.items[oldest]) {
			oldest, first = k, false
		}
	}
	delete(r.items, oldest)
}

func (r *recentSessions) forget(app, user, id string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.items, sessionRef{app, user, id})
}

// list is the remembered sessions, newest update first.
func (r *recentSessions) list() []recentJSON {
	r.mu.Lock()
	type row struct {
		ref sessionRef
		t   time.Time
	}
	rows := make([]row, 0, len(r.items))
	for k, v := range r.items {
		rows = append(rows, row{k, v})
	}
	r.mu.Unlock()
	slices.SortFunc(rows, func(a, b row) int { return b.t.Compare(a.t) })
	out := make([]recentJSON, len(rows))
	for i, x := range rows {
		out[i] = recentJSON{AppName: x.ref.App, UserID: x.ref.User, ID: x.ref.ID, LastUpdateTime: epochSeconds(x.t)}
	}
	return out
}
