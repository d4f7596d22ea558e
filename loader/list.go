package loader

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/adksession/adksession/cache"
	"github.com/adksession/adksession/cache/base"
	"github.com/adksession/adksession/persist"
)

// Listed is one session of a listing: its meta and merged-scope state (no
// events).
type Listed struct {
	User, SID string
	Snap      *cache.Snapshot
	// FromDB: Redis held none of the session; Snap is the database's row.
	FromDB bool
}

// ListUser returns a page of a user's sessions, newest update first. With a
// database it first puts back what Redis lost of the user (state, session
// index); sessions Redis no longer holds are read from the database, one
// query per page, and not put back (no events are loaded). An index evicted
// between that check and the read of the page is put back and read again.
func (l *Loader) ListUser(ctx context.Context, app, user, token string, limit int) ([]Listed, string, error) {
	for attempt := 1; ; attempt++ {
		if l.durable {
			if err := l.restoreUser(ctx, app, user); err != nil {
				return nil, "", err
			}
		}
		items, next, complete, err := l.cache.ListUser(ctx, app, user, token, limit)
		if err != nil {
			return nil, "", err
		}
		if !complete && l.durable {
			if attempt < maxIndexReads {
				continue
			}
			return nil, "", fmt.Errorf("list sessions of user %s: the session index was evicted %d times while read", user, attempt)
		}
		out, err := l.fill(ctx, app, items)
		if err != nil {
			return nil, "", err
		}
		out, err = l.followTimes(ctx, app, user, items, next, out)
		return out, next, err
	}
}

// followTimes repairs the user index where a page's sessions are not at
// the update time listed (Redis came back with an older index, or ADK
// wrote to a session in the database that Redis no longer holds) and
// returns the page in the order of the times listed. The walk the page is
// part of still lists each session once: a session moved past the end of
// the page (items' last, when there is a next page) is left to the page
// that reaches its new place, whether this page's repair or another
// listing's moved it; one moved up is listed here, and later pages start
// after this one. Nothing is read or written when every session is
// at its time (docs/design.md, "Indexes and lists").
func (l *Loader) followTimes(ctx context.Context, app, user string, items []cache.ListItem, next string, out []Listed) ([]Listed, error) {
	score := make(map[string]int64, len(items))
	for _, it := range items {
		score[it.SID] = it.Score
	}
	var fixes []cache.IndexFix
	for _, o := range out {
		was, ut := score[o.SID], o.Snap.UpdateTime
		// A copy behind the database keeps its place at the database's
		// time (above its own): Redis's times only raise a place.
		if ut != was && (o.FromDB || ut > was) {
			fixes = append(fixes, cache.IndexFix{SID: o.SID, Was: was, To: ut, Cached: !o.FromDB})
		}
	}
	if len(fixes) == 0 {
		return out, nil
	}
	places, err := l.cache.RepairUserIndex(ctx, app, user, fixes)
	if err != nil {
		return nil, err
	}
	last := items[len(items)-1]
	moved := map[string]bool{}
	for i, f := range fixes {
		// Moved by this repair or by another listing's: where it is now
		// decides which page lists it.
		at := places[i]
		if at.Indexed && next != "" && cache.UserCursorAfter(at.Score, f.SID, last.Score, last.SID) {
			moved[f.SID] = true
		}
	}
	out = slices.DeleteFunc(out, func(o Listed) bool { return moved[o.SID] })
	slices.SortStableFunc(out, func(a, b Listed) int {
		if c := cmp.Compare(b.Snap.UpdateTime, a.Snap.UpdateTime); c != 0 {
			return c
		}
		return strings.Compare(b.SID, a.SID)
	})
	return out, nil
}

// maxIndexReads bounds the reads of a user's session index that Redis
// evicts again each time it is put back.
const maxIndexReads = 5

// restoreUser puts back the user's state and session index if Redis lost
// either.
func (l *Loader) restoreUser(ctx context.Context, app, user string) error {
	cached, complete, err := l.cache.UserIndexState(ctx, app, user)
	switch {
	case err != nil:
		return err
	case !cached:
		return l.hydrateUser(ctx, app, user)
	case !complete:
		return l.completeUserIndex(ctx, app, user)
	}
	return nil
}

// ListApp returns a page of the sessions of every user of app, in (user,
// session id) byte order. With a database, the database lists what it has
// and Redis's app index the sessions whose create is not flushed yet; the
// page is the merge of the two (a session in both is listed once, from Redis).
func (l *Loader) ListApp(ctx context.Context, app, token string, limit int) ([]Listed, string, error) {
	after, err := cache.DecodeAppToken(token)
	if err != nil {
		return nil, "", err
	}
	// Redis first, then the database: a session flushed in between (and so
	// removed from the app index) is in the database by then.
	keys, err := l.cache.AppIndexRange(ctx, app, after, limit+1)
	if err != nil {
		return nil, "", err
	}
	var from base.SessionRef // zero: the first page
	if after.User != "" {
		from = base.SessionRef{App: app, User: after.User, ID: after.SID}
	}
	db, err := l.db.ListSessions(ctx, app, from, limit+1)
	if err != nil {
		return nil, "", fmt.Errorf("list sessions of app %s in the database: %w", app, err)
	}
	keys = mergeKeys(keys, db.Sessions)
	next := ""
	if len(keys) > limit {
		keys = keys[:limit]
		next = cache.AppToken(keys[limit-1])
	}
	out, err := l.fill(ctx, app, keys)
	return out, next, err
}

// mergeKeys merges keys of Redis's app index and of database rows, both in
// byte order, into one ordered list without duplicates.
func mergeKeys(a []cache.ListItem, rows []persist.SessionSummary) []cache.ListItem {
	out := make([]cache.ListItem, 0, len(a)+len(rows))
	i, j := 0, 0
	for i < len(a) || j < len(rows) {
		if j == len(rows) {
			out = append(out, a[i])
			i++
			continue
		}
		b := cache.ListItem{User: rows[j].Key.User, SID: rows[j].Key.ID}
		c := 1
		if i < len(a) {
			if c = strings.Compare(a[i].User, b.User); c == 0 {
				c = strings.Compare(a[i].SID, b.SID)
			}
		}
		switch {
		case c < 0:
			out = append(out, a[i])
			i++
		case c == 0:
			out = append(out, a[i])
			i, j = i+1, j+1
		default:
			out = append(out, b)
			j++
		}
	}
	return out
}

// fill reads the sessions of items: from Redis (one pipeline), else from
// the database in one query, read after Redis, with the state of each user
// Redis does not hold. Deleted sessions, and those neither store has, are
// left out; the others keep their order. Nothing the database returned
// before the read of Redis is used: a session deleted since, whose delete
// was flushed and whose tombstone Redis removed before the read of Redis,
// would be listed (TestAppListWhileDeleteFlushed), and a user's state
// flushed since, whose hash Redis let go of before its read, would be the
// older one (TestAppListUserStateAfterLetGo; both found by the simulation).
func (l *Loader) fill(ctx context.Context, app string, items []cache.ListItem) ([]Listed, error) {
	if len(items) == 0 {
		return nil, nil
	}
	r, err := l.cache.ReadListed(ctx, app, items)
	if err != nil {
		return nil, err
	}
	rows := map[base.SessionRef]*persist.SessionSummary{}
	users := r.Users // Redis's user state is the current one; the database's fills in
	addUsers := func(db *persist.Listing) {
		for u, st := range db.Users {
			if _, ok := users[u]; !ok {
				users[u] = rawStrings(st)
			}
		}
	}
	var need []base.SessionRef
	for i, it := range items {
		_, haveUser := users[it.User]
		if !r.Deleted[i] && (r.Sessions[i] == nil || !haveUser) {
			need = append(need, base.SessionRef{App: app, User: it.User, ID: it.SID})
		}
	}
	if len(need) > 0 {
		got, err := l.db.ReadSessions(ctx, app, need)
		if err != nil {
			return nil, fmt.Errorf("read listed sessions from the database: %w", err)
		}
		for i := range got.Sessions {
			rows[got.Sessions[i].Key] = &got.Sessions[i]
		}
		addUsers(got)
	}
	appState, err := l.appState(ctx, app, r.App, r.AppCached)
	if err != nil {
		return nil, err
	}
	out := make([]Listed, 0, len(items))
	for i, it := range items {
		snap := r.Sessions[i]
		if r.Deleted[i] {
			continue
		}
		if snap == nil {
			row := rows[base.SessionRef{App: app, User: it.User, ID: it.SID}]
			if row == nil {
				continue // deleted meanwhile
			}
			snap = &cache.Snapshot{Incarnation: row.Incarnation, CreateTime: row.CreateTime.UnixMicro(),
				UpdateTime: row.UpdateTime.UnixMicro(), Rev: row.Rev, State: rawStrings(row.State)}
		}
		snap.User, snap.App = users[it.User], appState
		if snap.User == nil {
			snap.User = map[string]string{}
		}
		out = append(out, Listed{User: it.User, SID: it.SID, Snap: snap, FromDB: r.Sessions[i] == nil})
	}
	return out, nil
}

func rawStrings[V ~[]byte](m map[string]V) map[string]string {
	out := make(map[string]string, len(m))
	for k, v := range m {
		out[k] = string(v)
	}
	return out
}

// completeUserIndex puts back a user's session index that Redis lost (or
// never had): the sessions the database has and those whose create is not
// flushed yet (in the app index), marked complete. Without a database the
// index is never lost (nothing expires).
func (l *Loader) completeUserIndex(ctx context.Context, app, user string) error {
	if _, complete, err := l.cache.UserIndexState(ctx, app, user); err != nil || complete {
		return err
	}
	return l.guarded(ctx, base.SessionRef{App: app, User: user}, func(guard cache.ReadGuard) error {
		// Redis first, then the database: a create flushed in between is in
		// the database by then.
		unflushed, err := l.cache.UnflushedSessions(ctx, app, user)
		if err != nil {
			return err
		}
		times, err := l.db.SessionTimes(ctx, app, user)
		if err != nil {
			return fmt.Errorf("list sessions of user %s in the database: %w", user, err)
		}
		entries := make([]cache.IndexEntry, 0, len(times)+len(unflushed))
		for _, t := range times {
			entries = append(entries, cache.IndexEntry{SID: t.SessionID, Stored: true, UpdateTime: t.UpdateTime.UnixMicro()})
		}
		for _, sid := range unflushed {
			entries = append(entries, cache.IndexEntry{SID: sid})
		}
		return l.cache.RebuildUserIndex(ctx, app, user, entries, l.opts.CacheTTL, guard)
	})
}
