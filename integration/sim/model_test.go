package sim

// The reference model: what the contract (the README's consistency model and docs/design.md) says every
// acknowledged operation leaves behind. It does no I/O; the driver feeds it the
// operations the system acknowledged and asks it what the system must answer.

import (
	"encoding/json"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/adksession/adksession/service"
)

// Scope prefixes, checked in this order ("app:user:x" is the app key "user:x").
const (
	appPrefix  = "app:"
	userPrefix = "user:"
	tempPrefix = "temp:"
)

type sessKey struct{ App, User, SID string }

func (k sessKey) String() string { return fmt.Sprintf("%q/%q/%q", k.App, k.User, k.SID) }

type userKey struct{ App, User string }

// mEvent is an event as stored: its timestamp is the stored one (µs), its
// delta has no temp: keys and holds values as they read back from JSON.
type mEvent struct {
	ID, Inv, Author string
	Ts              int64
	Content         json.RawMessage
	Delta           map[string]any
	Artifacts       map[string]int64
	RewindBefore    string
	// What the driver knows of how it was sent: the client, the timestamp it
	// asked for (0: none, the service stamped it) and the event as sent
	// (nil for rewind events), for duplicate deliveries.
	Client int
	Req    int64
	Sent   *service.Event
	// ADK: written to the database as ADK Python's append_event writes it
	// (opADK), not through the service.
	ADK bool
}

// mSession is one incarnation of a session.
type mSession struct {
	Inc     int64          // incarnation = create time, µs
	Initial map[string]any // session-scoped keys of the create-time state
	Events  []*mEvent
	// Temp state of the invocation TInv: Temp holds every key it may hold,
	// TempSure the keys it must hold (after a cache loss the rest may be gone).
	TInv     string
	Temp     map[string]any
	TempSure map[string]bool
	// LostAt: when the model last learnt that Redis may have lost the temp
	// state (zero: never).
	LostAt time.Time
	// Behind: Redis may hold an older copy of the session than the database
	// (a restart from an older snapshot, an old copy of its keys put back,
	// ADK rows appended to the database; docs/design.md, "Redis behind the
	// database"). Until the copy is gone, a read may answer View (the copy's
	// events, those appended since with the timestamps Redis answered)
	// instead of Events (the database's, which are the authority: the events
	// appended since go after the database's, each moved to the previous one
	// + 1 µs when not after it).
	Behind bool
	View   []*mEvent
	// CopyLost: Redis lost a key of the older copy that the session is
	// read back for (copyGone); the next call that finds it ends the copy
	// (readBack).
	CopyLost copyLost
	// FlushedN: events a complete flush wrote to the database (a
	// regression may not lose them).
	FlushedN int
	// LostUT: the times of events a regress lost after the last event
	// kept, which the sessions row may carry as its update time until a
	// later event (lostState).
	LostUT []int64
	// IndexLow: a regress lost an event stamped before the session's update
	// time after it (a first event before the creation), whose time the
	// user index may still hold: the user index is no part of a DUMP copy,
	// so the session's place there may be below its update time until an
	// event or a listing's repair raises it, and a walk of the user's
	// sessions lists it late (cluster concurrent seed 842262357031,
	// checkpoint 2). Kept (docs/simulation.md).
	IndexLow bool
	// Again: the times at which Redis's older copy stored events the
	// database holds under their ids (storedAgain), which the database does
	// not take: Redis stamps an event after its copy's last, so the next
	// one may follow such a time, not the database's previous event.
	Again []int64
}

// sharedStamp checks the time a concurrently appended event e was stored
// at (ts) against the one it asked for, given the previous event of the
// stored history (prev; first: none): the later of the two, or just after
// a time an older copy stored an event again in between (Again).
func (s *mSession) sharedStamp(e *mEvent, ts, prev int64, first bool) string {
	if e.Req == 0 {
		return ""
	}
	after := []int64{}
	if !first {
		after = append(after, prev)
	}
	for _, a := range s.Again {
		if first || a > prev {
			after = append(after, a)
		}
	}
	if first && ts == e.Req || slices.ContainsFunc(after, func(a int64) bool { return ts == max(e.Req, a+1) }) {
		return ""
	}
	return fmt.Sprintf("event %q stored at %d, asked %d after %d", e.ID, ts, e.Req, prev)
}

// copyLost is what Redis lost of an older copy of a session (copyGone).
type copyLost int

const (
	copyKept        copyLost = iota
	copyLostAppends          // its event ids: the next append reads the session back
	copyLostReads            // its hash or events: the next read or append does
)

// views are the event lists a read of the session may answer.
func (s *mSession) views() [][]*mEvent {
	if !s.Behind {
		return [][]*mEvent{s.Events}
	}
	return [][]*mEvent{s.Events, s.View}
}

// as is the session with the events of view evs (for predictions and checks).
func (s *mSession) as(evs []*mEvent) *mSession {
	c := *s
	c.Events = evs
	return &c
}

func newSession(inc int64, initial map[string]any) *mSession {
	return &mSession{Inc: inc, Initial: initial, Temp: map[string]any{}, TempSure: map[string]bool{}}
}

func (s *mSession) rev() int64 { return int64(len(s.Events)) }

func (s *mSession) lastTs() int64 {
	if len(s.Events) == 0 {
		return 0
	}
	return s.Events[len(s.Events)-1].Ts
}

// updateTime is the session's LastUpdateTime in µs: the last event's, or the
// create time before any.
func (s *mSession) updateTime() int64 {
	if len(s.Events) == 0 {
		return s.Inc
	}
	return s.lastTs()
}

// updatedAt tells whether us is an update time the database's view of s
// may read: its last event's, or a lost one's the row kept (LostUT).
func (s *mSession) updatedAt(us int64) bool {
	return us == s.updateTime() || slices.Contains(s.LostUT, us)
}

// afterLost is s with, after its events, one at ts, a time a lost event
// may have left the sessions row (LostUT): a session read back from the row
// stamps its next event after that time.
func (s *mSession) afterLost(ts int64) *mSession {
	c := *s
	c.Events = append(slices.Clone(s.Events), &mEvent{Ts: ts})
	return &c
}

// storedTs is where an event asking for ts is stored: not after the previous
// event, it moves to the previous one + 1 µs.
func (s *mSession) storedTs(ts int64) int64 {
	if len(s.Events) > 0 && ts <= s.lastTs() {
		return s.lastTs() + 1
	}
	return ts
}

// stateBefore replays the session-scoped state before event p.
func (s *mSession) stateBefore(p int) map[string]any {
	st := maps.Clone(s.Initial)
	for _, e := range s.Events[:p] {
		for k, v := range e.Delta {
			if scopeOf(k) == scopeSession {
				st[k] = v
			}
		}
	}
	return st
}

func (s *mSession) state() map[string]any { return s.stateBefore(len(s.Events)) }

// invocations lists the session's invocation ids in order of their first event.
func (s *mSession) invocations() []string {
	var out []string
	seen := map[string]bool{}
	for _, e := range s.Events {
		if !seen[e.Inv] {
			seen[e.Inv] = true
			out = append(out, e.Inv)
		}
	}
	return out
}

func (s *mSession) event(id string) *mEvent {
	for _, e := range s.Events {
		if e.ID == id {
			return e
		}
	}
	return nil
}

// rewindDeltas are the deltas of a rewind before the first event of inv
// (docs/rewind.md): session keys whose value differs from the point set back
// (null when unset or null then), artifact versions (not user: files) that
// differ set back (-1 when the file had none).
func (s *mSession) rewindDeltas(inv string) (map[string]any, map[string]int64, bool) {
	p := slices.IndexFunc(s.Events, func(e *mEvent) bool { return e.Inv == inv })
	if p < 0 {
		return nil, nil, false
	}
	then, now := s.stateBefore(p), s.state()
	delta := map[string]any{}
	for _, k := range sortedKeys(then, now) {
		was, wasSet := then[k]
		cur, curSet := now[k]
		switch {
		case !wasSet || was == nil:
			if curSet && cur != nil {
				delta[k] = nil
			}
		case !curSet || !reflect.DeepEqual(was, cur):
			delta[k] = was
		}
	}
	thenFiles, nowFiles := map[string]int64{}, map[string]int64{}
	for i, e := range s.Events {
		for f, v := range e.Artifacts {
			if i < p {
				thenFiles[f] = v
			}
			nowFiles[f] = v
		}
	}
	files := map[string]int64{}
	for f, cur := range nowFiles {
		if strings.HasPrefix(f, userPrefix) {
			continue
		}
		was, ok := thenFiles[f]
		if !ok || was < 0 {
			was = -1
		}
		if cur < 0 {
			cur = -1
		}
		if was != cur {
			files[f] = was
		}
	}
	return delta, files, true
}

// tempLost: Redis may have lost the temp state (an eviction, FLUSHALL).
func (s *mSession) tempLost() { s.TempSure, s.LostAt = map[string]bool{}, time.Now() }

// applyTemp records the temp: keys of an event of invocation inv (stored);
// the first event of another invocation ends the previous one's temp state.
func (s *mSession) applyTemp(inv string, temp map[string]any) {
	if inv != s.TInv {
		s.TInv, s.Temp, s.TempSure = inv, map[string]any{}, map[string]bool{}
	}
	for k, v := range temp {
		s.Temp[k] = v
		s.TempSure[k] = true
	}
}

func (s *mSession) endInvocation(inv string) {
	if inv == s.TInv {
		s.TInv, s.Temp, s.TempSure = "", map[string]any{}, map[string]bool{}
	}
}

type scope int

const (
	scopeSession scope = iota
	scopeApp
	scopeUser
	scopeTemp
)

func scopeOf(k string) scope {
	switch {
	case strings.HasPrefix(k, appPrefix):
		return scopeApp
	case strings.HasPrefix(k, userPrefix):
		return scopeUser
	case strings.HasPrefix(k, tempPrefix):
		return scopeTemp
	}
	return scopeSession
}

// split divides a delta by scope: session keys as they are, app and user keys
// without their prefix, temp keys with theirs. Values as they read back from JSON.
func split(delta map[string]any) (sess, user, app, temp map[string]any) {
	sess, user, app, temp = map[string]any{}, map[string]any{}, map[string]any{}, map[string]any{}
	for k, v := range delta {
		v = jsonRound(v)
		switch scopeOf(k) {
		case scopeApp:
			app[strings.TrimPrefix(k, appPrefix)] = v
		case scopeUser:
			user[strings.TrimPrefix(k, userPrefix)] = v
		case scopeTemp:
			temp[k] = v
		default:
			sess[k] = v
		}
	}
	return
}

// Model is what every client was acknowledged. It is shared by the clients of
// a run: sessions are each driven by one client at a time, user and app state
// keys are each written by one client (their names carry it).
type Model struct {
	mu       sync.Mutex
	Sessions map[sessKey]*mSession // live sessions
	Users    map[userKey]map[string]any
	Apps     map[string]map[string]any
	// AppPending: app keys that may still read as before an operation that
	// was stored without its app step (see appMayLag): the values they may
	// hold, besides the model's, until the next complete flush.
	AppPending map[string]map[string][]any
	// Written: every value ever sent for a scoped key ("app/<app>/<key>",
	// "user/<app>/<user>/<key>", "sess/<session>/<key>"), for reads that race
	// another client's writes.
	Written map[string][]any
	// Loose: user and app keys (written keys) that Redis may hold behind the
	// database since a regression, with the values they may read as (absent{}
	// among them), in Redis and in the database, until they are written again.
	Loose map[string][]any
	// Unsettled: the user and app keys (written keys) of each operation not
	// settled yet (its call failed on a fault), with the values it sent: the
	// call may have taken effect, and they may read so, to its own client
	// too, until it is settled (Model.unsettled).
	Unsettled map[any]map[string]any
	// Writes: how many acknowledged writes each user and app key (written
	// key) has had (Model.racedSince).
	Writes map[string]int
}

func newModel() *Model {
	return &Model{Sessions: map[sessKey]*mSession{}, Users: map[userKey]map[string]any{},
		Apps: map[string]map[string]any{}, AppPending: map[string]map[string][]any{}, Written: map[string][]any{}, Loose: map[string][]any{},
		Unsettled: map[any]map[string]any{}, Writes: map[string]int{}}
}

func writtenKey(k sessKey, key string) string {
	switch scopeOf(key) {
	case scopeApp:
		return "app/" + k.App + "/" + strings.TrimPrefix(key, appPrefix)
	case scopeUser:
		return "user/" + k.App + "/" + k.User + "/" + strings.TrimPrefix(key, userPrefix)
	}
	return "sess/" + k.String() + "/" + key
}

// sent records the values of a delta about to be sent (before the answer).
func (m *Model) sent(k sessKey, delta map[string]any) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for key, v := range delta {
		w := writtenKey(k, key)
		m.Written[w] = append(m.Written[w], jsonRound(v))
	}
}

// applyScoped applies the user and app parts of an acknowledged delta.
func (m *Model) applyScoped(k sessKey, user, app map[string]any) {
	uk := userKey{k.App, k.User}
	if m.Users[uk] == nil {
		m.Users[uk] = map[string]any{}
	}
	maps.Copy(m.Users[uk], user)
	if m.Apps[k.App] == nil {
		m.Apps[k.App] = map[string]any{}
	}
	maps.Copy(m.Apps[k.App], app)
	// A key written again after a regression reads exactly again: the
	// database's state with each acknowledged delta applied (key by key).
	for key := range user {
		w := "user/" + k.App + "/" + k.User + "/" + key
		delete(m.Loose, w)
		m.Writes[w]++
	}
	for key := range app {
		w := "app/" + k.App + "/" + key
		delete(m.Loose, w)
		m.Writes[w]++
	}
}

// scopedKeys are the written keys of the user and app keys of delta, with
// the values sent (as they read back).
func scopedKeys(k sessKey, delta map[string]any) map[string]any {
	out := map[string]any{}
	for key, v := range delta {
		if sc := scopeOf(key); sc == scopeApp || sc == scopeUser {
			out[writtenKey(k, key)] = jsonRound(v)
		}
	}
	return out
}

// unsettled: an operation (token) on k that sent delta failed on a fault
// and is not settled yet. Its call may have been stored, and its user and
// app keys written, by Redis or later by the flusher's repair of its app:
// step (standalone concurrent seed 611470501151: a create's first attempt
// stored the session and failed before its app: step, the repair applied
// it, and a Get of another session of the same client read its value while
// the settle's retries still failed). Until settled, those keys may read as
// its values, to its own client too.
func (m *Model) unsettled(token any, k sessKey, delta map[string]any) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if keys := scopedKeys(k, delta); len(keys) > 0 {
		m.Unsettled[token] = keys
	}
}

// settled: the operation of token is settled (its outcome is in the model).
func (m *Model) settled(token any) {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.Unsettled, token)
}

// writesOf is the count of acknowledged writes of each user and app key of
// delta (to pass to racedSince).
func (m *Model) writesOf(k sessKey, delta map[string]any) map[string]int {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := map[string]int{}
	for w := range scopedKeys(k, delta) {
		out[w] = m.Writes[w]
	}
	return out
}

// racedSince: the user and app keys of delta that had an acknowledged write
// since writes (writesOf) was taken, with the model's value of each now.
// An operation that failed and is then found stored (a create answered
// ErrAlreadyExists, an event found in its session) was stored by one of its
// attempts: the first, before those writes (so they win: its user: keys
// went in with the session's step, its app: step's order number is lower),
// or a later one, after them (its app: step's number is higher). Either may
// read, in Redis and in the database, until the key is written again: pass
// the result to mayReadAs once the operation is recorded.
func (m *Model) racedSince(k sessKey, delta map[string]any, writes map[string]int) map[string]any {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := map[string]any{}
	for key := range delta {
		w := writtenKey(k, key)
		n, ok := writes[w]
		if !ok || m.Writes[w] == n {
			continue
		}
		cur, name := m.Apps[k.App], strings.TrimPrefix(key, appPrefix)
		if scopeOf(key) == scopeUser {
			cur, name = m.Users[userKey{k.App, k.User}], strings.TrimPrefix(key, userPrefix)
		}
		v, ok := cur[name]
		if !ok {
			v = absent{}
		}
		out[w] = v
	}
	return out
}

// mayReadAs: each written key of was may also read as its value (racedSince),
// until it is written again.
func (m *Model) mayReadAs(was map[string]any) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for w, v := range was {
		m.Loose[w] = append(m.Loose[w], v)
	}
}

// created records an acknowledged Create (create time inc µs).
func (m *Model) created(k sessKey, inc int64, state map[string]any) {
	m.mu.Lock()
	defer m.mu.Unlock()
	sess, user, app, _ := split(state)
	m.Sessions[k] = newSession(inc, sess)
	m.applyScoped(k, user, app)
}

// adkAppended records an event ADK wrote to the database (opADK): Redis's
// copy, if any, no longer holds every event of the session.
func (m *Model) adkAppended(k sessKey, e *mEvent, user map[string]any) {
	m.mu.Lock()
	defer m.mu.Unlock()
	s := m.Sessions[k]
	if !s.Behind {
		s.Behind, s.View, s.CopyLost = true, slices.Clone(s.Events), copyKept
	}
	s.Events = append(s.Events, e)
	uk := userKey{k.App, k.User}
	m.applyScoped(k, user, nil)
	for key, v := range user {
		// Redis's user hash does not hold ADK's write: it may read as before
		// until the user is rebased (or its hash goes).
		w := "user/" + k.App + "/" + k.User + "/" + key
		m.Written[w] = append(m.Written[w], v)
		m.looseKey(w, m.Users[uk], key)
	}
}

// looseKey: written key w (its scope's current map cur, its name key) may
// read as any value it was ever sent, or as absent, until it is written
// again (Redis regressed behind the database). Called with m.mu held.
func (m *Model) looseKey(w string, cur map[string]any, key string) {
	alts := append([]any{absent{}}, m.Written[w]...)
	if v, ok := cur[key]; ok {
		alts = append(alts, v)
	}
	m.Loose[w] = alts
}

// looseScopes makes every user key of the users (allUsers: of every user)
// and, with allApps, every app key loose.
func (m *Model) looseScopes(users map[userKey]bool, allUsers, allApps bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for w := range m.Written {
		for u, cur := range m.Users {
			if key, ok := strings.CutPrefix(w, "user/"+u.App+"/"+u.User+"/"); ok && (allUsers || users[u]) {
				m.looseKey(w, cur, key)
			}
		}
		for app, cur := range m.Apps {
			if key, ok := strings.CutPrefix(w, "app/"+app+"/"); ok && allApps {
				m.looseKey(w, cur, key)
			}
		}
	}
}

// appended records an acknowledged event (ts = stored timestamp) sent at
// since. A loss of the temp state after since does not spare the event's
// own temp keys: the script may have written them before the loss and the
// answer come after it (a call retried across a Redis restart is answered
// as a duplicate, and a duplicate writes nothing again), so they are not
// sure. Temp state is not promised across a cache loss (docs/simulation.md).
func (m *Model) appended(k sessKey, e *mEvent, temp map[string]any, userD, appD map[string]any, since time.Time) {
	m.mu.Lock()
	defer m.mu.Unlock()
	s := m.Sessions[k]
	if s.Behind {
		// Redis answered e's timestamp after its copy's last event; the
		// database stores it after its own last one.
		r := *e
		s.View = append(s.View, &r)
		if len(s.Events) > 0 && e.Ts <= s.lastTs() {
			e.Ts = s.lastTs() + 1
		}
	}
	s.Events = append(s.Events, e)
	s.LostUT = nil // the row takes this event's time
	s.IndexLow = false
	for key := range e.Delta {
		if scopeOf(key) == scopeSession {
			delete(m.Loose, writtenKey(k, key)) // and its keys
		}
	}
	s.applyTemp(e.Inv, temp)
	if s.LostAt.After(since) {
		s.TempSure = map[string]bool{}
	}
	m.applyScoped(k, userD, appD)
}

// viewAppended records an event only Redis's older copy of k holds, with
// the temp: keys it sent: the copy's script wrote them into its temp hash
// (a first event of another invocation ended the previous one's there),
// and the rebase that lets go of the copy keeps the temp hash (docs/design.md,
// "Temp state"). None of the temp state is sure.
func (m *Model) viewAppended(k sessKey, e *mEvent, temp map[string]any) {
	m.mu.Lock()
	defer m.mu.Unlock()
	s := m.Sessions[k]
	s.View = append(s.View, e)
	s.applyTemp(e.Inv, temp)
	s.TempSure = map[string]bool{}
}

// storedAgain: Redis's older copy of k stored again an event the database
// holds under its id (storedOverDB), at ts, with its user and app parts
// (keys without their prefix). Its user: keys went into the user hash, which the
// rebase then replaces with the database's; its app: step ran again as a
// new change with a new order number (which wins the merge into the
// database too) when Redis had lost the record of the first one, and not
// otherwise (docs/design.md, "Ids unknown to an older copy"). So each such
// key may read as before or as the event's value, in Redis and in the
// database, until it is written again.
func (m *Model) storedAgain(k sessKey, ts int64, user, app map[string]any) {
	m.mu.Lock()
	defer m.mu.Unlock()
	s := m.Sessions[k]
	s.Again = append(s.Again, ts)
	mayHold := func(w string, cur map[string]any, key string, v any) {
		alts := m.Loose[w]
		if alts == nil {
			was, ok := cur[key]
			if !ok {
				was = absent{}
			}
			alts = []any{was}
		}
		m.Loose[w] = append(alts, v)
	}
	for key, v := range user {
		mayHold("user/"+k.App+"/"+k.User+"/"+key, m.Users[userKey{k.App, k.User}], key, v)
	}
	for key, v := range app {
		mayHold("app/"+k.App+"/"+key, m.Apps[k.App], key, v)
	}
}

func (m *Model) deleted(k sessKey) {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.Sessions, k)
}

// absent stands for "no such key" among the values a key may hold.
type absent struct{}

// appMayLag: until the next complete flush, the app keys of delta may still
// read as they were before it. A Create that was stored but not acknowledged
// (its answer lost, its app step not done) is settled by a retry that answers
// ErrAlreadyExists and applies nothing; the flusher applies its logged app
// delta. Call it before applying the delta.
func (m *Model) appMayLag(app string, delta map[string]any) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if len(delta) == 0 {
		return
	}
	if m.AppPending[app] == nil {
		m.AppPending[app] = map[string][]any{}
	}
	for k := range delta {
		prev, ok := m.Apps[app][k]
		if !ok {
			prev = absent{}
		}
		m.AppPending[app][k] = append(m.AppPending[app][k], prev)
	}
}

// flushed: a complete flush applied every logged app delta.
func (m *Model) flushed() {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.AppPending = map[string]map[string][]any{}
	for _, s := range m.Sessions {
		s.FlushedN = len(s.Events)
	}
}

// mTemp is the temp state of a session as the model held it: the invocation
// and every key it may hold.
type mTemp struct {
	Inv  string
	Temp map[string]any
}

// tempOf is k's temp state now (a snapshot of Redis takes it with the rest).
func (m *Model) tempOf(k sessKey) mTemp {
	m.mu.Lock()
	defer m.mu.Unlock()
	s := m.Sessions[k]
	if s == nil {
		return mTemp{}
	}
	return mTemp{Inv: s.TInv, Temp: maps.Clone(s.Temp)}
}

// tempRegressed: Redis went back to a snapshot that held k's temp state as
// t. Temp state is not persisted, so the older copy brings the older temp
// state back: the invocation it names runs again for Redis (its end, and the
// first event of a later invocation, were lost with the events after the
// snapshot), with the keys it held then, none of them sure (as after an
// eviction: they may have expired or been evicted since). Temp keys belong
// to one invocation; which invocation is current is what the session's
// events say, and after the regress they are the snapshot's.
func (m *Model) tempRegressed(k sessKey, t mTemp) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if s := m.Sessions[k]; s != nil {
		s.tempLost()
		s.TInv, s.Temp = t.Inv, maps.Clone(t.Temp)
		if s.Temp == nil {
			s.Temp = map[string]any{}
		}
	}
}

// tempLostOf: Redis may have lost the temp state of k (an evicted key).
func (m *Model) tempLostOf(k sessKey) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if s := m.Sessions[k]; s != nil {
		s.tempLost()
	}
}

func (m *Model) allTempLost() {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, s := range m.Sessions {
		s.tempLost()
	}
}

func (m *Model) endInvocation(k sessKey, inv string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if s := m.Sessions[k]; s != nil {
		s.endInvocation(inv)
	}
}

// firstEventBeforeCreate tells whether k's first event is stamped before
// the session was created (its update time went back when it was appended).
func (m *Model) firstEventBeforeCreate(k sessKey) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	s := m.Sessions[k]
	return s != nil && len(s.Events) > 0 && s.Events[0].Ts < s.Inc
}

// indexedElsewhere: the user index may order live session k by another
// time than the one it reads as: Redis's older copy answers its own update
// time, and the user index (not part of the copy) orders it by the
// database's, or by the time of an event a regress lost (IndexLow)
// (docs/simulation.md, kept behaviours).
func (m *Model) indexedElsewhere(k sessKey) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	s := m.Sessions[k]
	return s != nil && (s.Behind || s.IndexLow)
}

// session returns a snapshot of a live session (nil when absent): its own
// events slice, maps shared (only the session's client changes them).
func (m *Model) session(k sessKey) *mSession {
	m.mu.Lock()
	defer m.mu.Unlock()
	s := m.Sessions[k]
	if s == nil {
		return nil
	}
	c := *s
	c.Events = slices.Clone(s.Events)
	return &c
}

// merged is the state a Get of k must return, without temp: keys.
func (m *Model) merged(k sessKey, evs []*mEvent) map[string]any {
	m.mu.Lock()
	defer m.mu.Unlock()
	st := m.Sessions[k].as(evs).state()
	for kk, v := range m.Users[userKey{k.App, k.User}] {
		st[userPrefix+kk] = v
	}
	for kk, v := range m.Apps[k.App] {
		st[appPrefix+kk] = v
	}
	return st
}

// ownerOf is the client that writes a key: its name (after the scope
// prefix) starts with "c<n>.". -1 for keys of no client.
func ownerOf(key string) int {
	for _, p := range []string{appPrefix, userPrefix, tempPrefix} {
		if strings.HasPrefix(key, p) {
			key = key[len(p):]
			break
		}
	}
	key = strings.TrimPrefix(key, userPrefix) // "app:user:c0.z"
	if !strings.HasPrefix(key, "c") {
		return -1
	}
	i := strings.IndexByte(key, '.')
	if i < 2 {
		return -1
	}
	n, err := strconv.Atoi(key[1:i])
	if err != nil {
		return -1
	}
	return n
}

// stateDiff compares a merged state read by client me with the model. Keys
// another client writes may hold any value that client sent (its write may
// race the read), or be absent; app keys an unacknowledged operation set may
// hold any of its values. With inv, temp: keys of that invocation are
// expected (those Redis may have lost may be absent).
func (m *Model) stateDiff(k sessKey, got map[string]any, me int, owned bool, inv string) []string {
	var first []string
	for i, evs := range m.session(k).views() {
		diffs := m.stateDiffOf(k, evs, got, me, owned, inv)
		if len(diffs) == 0 {
			return nil
		}
		if i == 0 {
			first = diffs
		}
	}
	return first
}

// stateDiffOf is stateDiff for the session holding events evs.
func (m *Model) stateDiffOf(k sessKey, evs []*mEvent, got map[string]any, me int, owned bool, inv string) []string {
	want := m.merged(k, evs)
	m.mu.Lock()
	defer m.mu.Unlock()
	s := m.Sessions[k]
	var temp map[string]any
	var sure map[string]bool
	if inv != "" && inv == s.TInv {
		temp, sure = s.Temp, s.TempSure
	}
	var diffs []string
	for _, key := range sortedKeys(want, got) {
		w, wok := want[key]
		g, gok := got[key]
		if scopeOf(key) == scopeTemp {
			tw, tok := temp[key]
			switch {
			case gok && !tok:
				diffs = append(diffs, fmt.Sprintf("state %q: %s, want no such temp key (invocation %q, temp of %q)", key, js(g), inv, s.TInv))
			case gok && !reflect.DeepEqual(g, tw):
				diffs = append(diffs, fmt.Sprintf("state %q: %s, want %s", key, js(g), js(tw)))
			}
			continue
		}
		if gok && wok && reflect.DeepEqual(g, w) {
			continue
		}
		if loose := m.looseOK(k, key, g, gok, me, owned); loose {
			continue
		}
		switch {
		case !gok:
			diffs = append(diffs, fmt.Sprintf("state %q: missing, want %s", key, js(w)))
		case !wok:
			diffs = append(diffs, fmt.Sprintf("state %q: %s, want no such key", key, js(g)))
		default:
			diffs = append(diffs, fmt.Sprintf("state %q: %s, want %s", key, js(g), js(w)))
		}
	}
	for key := range sure {
		if _, ok := got[key]; !ok {
			diffs = append(diffs, fmt.Sprintf("state %q: missing, want temp %s", key, js(temp[key])))
		}
	}
	return diffs
}

// looseOK tells whether a value that differs from the model is allowed: a key
// of another client (racing writes), or a pending app key. Called with m.mu held.
func (m *Model) looseOK(k sessKey, key string, g any, present bool, me int, owned bool) bool {
	if m.looseValue(writtenKey(k, key), g, present) {
		return true
	}
	if scopeOf(key) == scopeApp {
		for _, v := range m.AppPending[k.App][strings.TrimPrefix(key, appPrefix)] {
			if _, gone := v.(absent); gone && !present || present && reflect.DeepEqual(v, g) {
				return true
			}
		}
	}
	mine := ownerOf(key) == me || me < 0
	if scopeOf(key) == scopeSession && owned {
		mine = true
	}
	if mine {
		return false
	}
	if !present {
		return true
	}
	for _, v := range m.Written[writtenKey(k, key)] {
		if reflect.DeepEqual(v, g) {
			return true
		}
	}
	return false
}

// looseValue tells whether written key w is loose and may read as g (or,
// not present, as absent), or holds g as the value an unsettled operation
// sent (Model.unsettled). Called with m.mu held.
func (m *Model) looseValue(w string, g any, present bool) bool {
	for _, v := range m.Loose[w] {
		if _, gone := v.(absent); gone && !present || present && reflect.DeepEqual(v, g) {
			return true
		}
	}
	for _, keys := range m.Unsettled {
		if v, ok := keys[w]; ok && present && reflect.DeepEqual(v, g) {
			return true
		}
	}
	return false
}

// ---------------------------------------------------------------------------
// Helpers.

// jsonRound is v as it reads back from JSON.
func jsonRound(v any) any {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	var out any
	if err := json.Unmarshal(b, &out); err != nil {
		panic(err)
	}
	return out
}

// js renders a value for a message.
func js(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprint(v)
	}
	return string(b)
}

func sortedKeys[V any](ms ...map[string]V) []string {
	set := map[string]bool{}
	for _, m := range ms {
		for k := range m {
			set[k] = true
		}
	}
	out := make([]string, 0, len(set))
	for k := range set {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
