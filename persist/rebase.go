package persist

import (
	"bytes"
	"cmp"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/adksession/adksession/cache/base"
)

// Redis behind the database (docs/design.md): Redis can come back holding an
// older copy of a session or a user than the database (a restart from an
// RDB snapshot, a failover to a replica that lagged, a FLUSHALL while a
// batch was in flight, a restore), and ADK may have appended to a session
// in the database. Redis then numbers new events with seqs the database
// already has, and its state snapshots carry older values. The database is
// the authority: such a session's batch is rebased onto what the database
// holds (its new events after the database's, its state the database's plus
// the new events' deltas), and so is the state of its user.

// rowFacts is what the bookkeeping read says of a sessions row beyond its
// rev.
type rowFacts struct {
	// foreign: the sessions row's update_time is not the one adksession
	// last wrote: ADK (or another writer) appended to it since.
	foreign bool
}

// Outcome is what Apply (or ApplyEach) found while writing a batch.
type Outcome struct {
	// Rebased are the sessions whose events Redis numbered over the
	// database's (or that ADK appended to): their new events were written
	// after the database's and their state from the database's. Their
	// Redis copy is out of step with the database and should be let go of
	// once it holds nothing unflushed (cache.Flushed.Rebased).
	Rebased []base.SessionRef
	// RebasedUsers are the users (AppName, UserID) whose state was written
	// as the database's plus the batch's new deltas.
	RebasedUsers []base.SessionRef
	// AppsBehind are app keys whose value in the database is newer (a
	// higher order number) than in Redis's copy: the flusher puts them back
	// into Redis, each key only where no newer change wrote it since.
	AppsBehind []AppKeyValue
	// Updated is the update_time the batch wrote into each sessions row it
	// upserted (a rebased session's is after the database's events): the
	// session's place in its user's index follows it once Redis's copy
	// holds nothing newer (cache.Flushed.UpdateTime).
	Updated map[base.SessionRef]time.Time
	// Conflicts are acknowledged events of the batch the database cannot
	// take, as it is the authority: it keeps what it holds and the
	// flusher dead-letters them (docs/design.md, "Acknowledged writes the
	// database cannot take").
	Conflicts []Conflict
}

// Conflict is an acknowledged event the database cannot take (Outcome).
type Conflict struct {
	Key     base.SessionRef
	EventID string
	Seq     int64
	// After, when not 0: only an event whose change was logged after this
	// time (µs) was acknowledged after what the database holds; one logged
	// before it was part of what the database removed since (an older
	// copy's log replays it), and is no conflict.
	After  int64
	Reason string
}

// The reasons of Conflicts, after "event <id> of session <app>/<user>/<id>: ".
const (
	// ReasonReusedID: the database holds another event under the id.
	ReasonReusedID = "the database holds another event under its id, and keeps it (Redis's older copy of the session stored and acknowledged this one)"
	// ReasonDeleted: the database deleted the session, or holds a later
	// incarnation of it.
	ReasonDeleted = "the database deleted the session, or holds it created again, after Redis's older copy of the session stored and acknowledged this event"
)

// appendConflict appends to cs that e of session k cannot be written.
func appendConflict(cs []Conflict, k base.SessionRef, e EventRow, after int64, reason string) []Conflict {
	return append(cs, Conflict{Key: k, EventID: e.ID, Seq: e.Seq, After: after,
		Reason: fmt.Sprintf("event %s of session %s/%s/%s: %s", e.ID, k.App, k.User, k.ID, reason)})
}

// AppKeyValue is one app key as the database holds it, with the order
// number of the change that wrote it.
type AppKeyValue struct {
	App, Key string
	Value    json.RawMessage
	Order    int64
}

// dbSession is what the database holds of a session being rebased.
type dbSession struct {
	count   int64
	last    time.Time // the newest event's timestamp; zero without events
	state   map[string]json.RawMessage
	updated time.Time
	held    map[string]time.Time // the batch's event ids the database holds, with their timestamps
	data    map[string][]byte    // and their event_data
}

// rebaseTx returns b with the sessions and user states that Redis holds
// behind the database rebased onto it (b itself is left as it is, but for
// its Outcome, which it sets). A session is checked only when its
// bookkeeping says it may be behind (an event of the batch at or below the
// row's rev, or a row someone else wrote), so the common batch reads
// nothing more.
func (s *Store) rebaseTx(ctx context.Context, tx *sql.Tx, b *Batch, sessions map[base.SessionRef]tracked,
	facts map[base.SessionRef]rowFacts, states, flushes map[stateKey]int64) (*Batch, error) {
	b.Outcome = Outcome{}
	users := map[stateKey]bool{}
	for _, st := range b.UserStates {
		k := stateKey{app: st.AppName, user: st.UserID}
		// Redis counts a hash's flushes before the database records the
		// count: at or below the database's, the hash is an older copy; so
		// it is when the count it knew recorded is (reads of batches that
		// never committed count in Redis only).
		if st.Rebase || (st.Flush > 0 && st.Flush <= flushes[k]) || (st.Recorded > 0 && st.Recorded <= flushes[k]) {
			users[k] = true
		}
	}
	var out *Batch
	for i := range b.Sessions {
		u := &b.Sessions[i]
		t, ok := sessions[u.Key]
		if !ok || t.deleted || t.incarnation != u.Incarnation || !mayBeBehind(u, t, facts[u.Key]) {
			continue
		}
		db, err := readDBSession(ctx, tx, s.d, u.Key, u.Events)
		if err != nil {
			return nil, err
		}
		over, late := numberedOver(u, t, db)
		for _, e := range u.Events {
			// Another event under e's id: the database keeps its own,
			// whichever way the batch goes (a rebase drops e, a batch
			// below the row's rev writes nothing).
			if data, ok := db.data[e.ID]; ok && !sameEventAnyTime(data, e) {
				b.Outcome.Conflicts = appendConflict(b.Outcome.Conflicts, u.Key, e, 0, ReasonReusedID)
			}
		}
		switch {
		case facts[u.Key].foreign || over || u.Rebase:
			if out == nil {
				out = cloneBatch(b)
			}
			out.Sessions[i] = rebaseSession(u, t, db)
			b.Outcome.Rebased = append(b.Outcome.Rebased, u.Key)
			users[stateKey{app: u.Key.App, user: u.Key.User}] = true
		case late && u.Rev < t.rev:
			// Events the database never got (a dead-lettered session row
			// retried after later events were written): they go in at
			// their own times, into the row as the database holds it.
			if out == nil {
				out = cloneBatch(b)
			}
			out.Sessions[i] = lateSession(u, t, db)
		}
	}
	if len(users) == 0 {
		if out == nil {
			return b, nil
		}
		return out, nil
	}
	if out == nil {
		out = cloneBatch(b)
	}
	for _, k := range slices.SortedFunc(maps.Keys(users), compareStateKeys) {
		if err := rebaseUser(ctx, tx, s.d, out, b.Outcome.Rebased, k, sessions, states); err != nil {
			return nil, err
		}
		b.Outcome.RebasedUsers = append(b.Outcome.RebasedUsers, base.SessionRef{App: k.app, User: k.user})
	}
	return out, nil
}

// mayBeBehind: the bookkeeping row t allows that Redis numbered u's events
// over the database's: one of them is at or below the row's rev, or
// someone else wrote the row, or Redis's copy is one a flush rebased
// (u.Rebase).
func mayBeBehind(u *SessionUpsert, t tracked, f rowFacts) bool {
	if f.foreign || u.Rebase {
		return true
	}
	for _, e := range u.Events {
		if e.Seq <= t.rev {
			return true
		}
	}
	return false
}

// numberedOver tells apart the events of u at or below the row's rev that
// the database does not hold. One above what Redis believes flushed
// (u.Flushed) was given a seq the database had given another event: Redis
// is behind (over). One at or below it is late: Redis's numbering is the
// database's, and the database never got that event (its session row was
// dead-lettered, and later events were written before the retry).
//
// An event the database holds at another time than u's was stored again by
// a copy that lacked it (its id sent again through a handle read from an
// older copy: docs/design.md, "Ids unknown to an older copy"): Redis is
// behind as well (over), even when it gave the event the database's seq, and
// its row (state, update time) is not the database's. A replay (the batch
// of a flusher that died after its commit) carries the times the database
// holds, but for a rebased batch's moved events (the database holds them
// later): such a replay is below the row's rev and writes nothing, so an
// event the database holds later counts only when the row would be written.
// One the database holds at the same time with other content is another
// event under a reused id that the copy stored at the database's time (the
// previous event's + 1 µs on both sides): over as well, and the database
// keeps its own (simulation seed 953023679376).
func numberedOver(u *SessionUpsert, t tracked, db *dbSession) (over, late bool) {
	for _, e := range u.Events {
		if at, ok := db.held[e.ID]; ok {
			dbUS, copyUS := at.UnixMicro(), e.Timestamp.UnixMicro()
			over = over || dbUS < copyUS || (dbUS > copyUS && u.Rev >= t.rev) ||
				(dbUS == copyUS && !sameStoredEvent(db.data[e.ID], e))
			continue
		}
		if e.Seq > t.rev {
			continue
		}
		if e.Seq > u.Flushed {
			over = true
		} else {
			late = true
		}
	}
	return over, late
}

// lateSession returns u as a replay of the row the database holds (its
// rev, state and update time) that also writes u's late events, at their
// own times.
func lateSession(u *SessionUpsert, t tracked, db *dbSession) SessionUpsert {
	out := *u
	out.Rev, out.State, out.UpdateTime = t.rev, db.state, db.updated
	if out.State == nil {
		out.State = map[string]json.RawMessage{}
	}
	return out
}

// rebaseSession returns u rebased onto what the database holds: the events
// the database lacks that Redis numbered over the database's, in Redis's
// order, each after the database's newest (moved to the previous one's +
// 1 µs when not after it), and the late ones at their own times; the
// database's session state with the moved events' session-scoped deltas
// applied in order; a rev counting the database's events and the moved ones.
func rebaseSession(u *SessionUpsert, t tracked, db *dbSession) SessionUpsert {
	out := *u
	out.Events = nil
	out.State = maps.Clone(db.state)
	if out.State == nil {
		out.State = map[string]json.RawMessage{}
	}
	prev := db.last
	moved := int64(0)
	for _, e := range u.Events {
		if _, ok := db.held[e.ID]; ok {
			continue
		}
		if e.Seq <= u.Flushed {
			// Late (see numberedOver): at its own time, its delta already
			// in the state the database holds.
			out.Events = append(out.Events, e)
			continue
		}
		if !e.Timestamp.After(prev) {
			e.Timestamp = prev.Add(time.Microsecond)
		}
		prev = e.Timestamp
		moved++
		for k, v := range eventDelta(e.Data) {
			if scopeOf(k) == scopeSession {
				out.State[k] = v
			}
		}
		out.Events = append(out.Events, e)
	}
	out.Rev = max(t.rev, db.count) + moved
	out.UpdateTime = db.updated
	if moved > 0 {
		out.UpdateTime = prev
	}
	return out
}

// rebaseUser makes the batch's state of user k the database's with the
// user: deltas of the batch's new changes applied in log order (its new
// events', and the UserWrites the database lacks), at a rev above the
// database's. rebased are the batch's rebased sessions.
func rebaseUser(ctx context.Context, tx *sql.Tx, d *dialect, b *Batch, rebasedSessions []base.SessionRef, k stateKey,
	sessions map[base.SessionRef]tracked, states map[stateKey]int64) error {
	var state stateColumn
	err := tx.QueryRowContext(ctx, `SELECT state FROM user_states WHERE app_name = $1 AND user_id = $2`+d.lockRow("user_states"), k.app, k.user).Scan(&state)
	if err != nil && !errors.Is(err, sql.ErrNoRows) {
		return fmt.Errorf("read user state to rebase: %w", err)
	}
	if state == nil {
		state = stateColumn{}
	}
	var news []UserWrite
	for _, u := range b.Sessions {
		if u.Key.App != k.app || u.Key.User != k.user {
			continue
		}
		t, tracked := sessions[u.Key]
		rebased := slices.Contains(rebasedSessions, u.Key)
		for _, e := range u.Events {
			// A rebased session's events are all new; another's are new
			// above the database's rev (or all, for a new incarnation). A
			// fork's copies write no user state of their own.
			if e.Copied {
				continue
			}
			if rebased || !tracked || t.incarnation != u.Incarnation || e.Seq > t.rev {
				w := UserWrite{LogPos: e.LogPos, Delta: map[string]json.RawMessage{}}
				for key, v := range eventDelta(e.Data) {
					if scopeOf(key) == scopeUser {
						w.Delta[strings.TrimPrefix(key, "user:")] = v
					}
				}
				news = append(news, w)
			}
		}
	}
	// The writes no event of the batch carries (a create's initial user:
	// keys, the events of a session deleted since), unless the database
	// holds their change: its session at a later incarnation, deleted, or
	// created (and, for an event at or below the row's rev, the event
	// itself: by its id, since an older copy in Redis numbers over the
	// database's events and may stamp its own at the very time of the
	// database's at that seq; by its time for a change logged without it).
	for _, w := range b.UserWrites {
		if w.Key.App != k.app || w.Key.User != k.user {
			continue
		}
		t, tracked := sessions[w.Key]
		switch {
		case !tracked || t.incarnation < w.Incarnation:
		case t.incarnation > w.Incarnation || t.deleted || w.Seq == 0:
			continue
		case w.Seq <= t.rev:
			held, err := eventHeld(ctx, tx, d, w)
			if err != nil {
				return err
			}
			if held {
				continue
			}
		}
		news = append(news, w)
	}
	slices.SortStableFunc(news, func(a, b UserWrite) int { return cmp.Compare(a.LogPos, b.LogPos) })
	for _, w := range news {
		maps.Copy(state, w.Delta)
	}
	// The row takes the revision Redis's hash had when it was read, not
	// one above the database's: the hash numbers its next writes from it,
	// and a later snapshot of the hash not rebased (its count above the
	// database's) at or below the row's revision would be taken for one
	// the row holds and dropped (simulation seed 611470501151). A user
	// without a snapshot (Redis held no hash) keeps the row's revision,
	// read first (planStates treats a user it was not read for as
	// untracked). Merged: written whatever its Rev.
	i := slices.IndexFunc(b.UserStates, func(st StateUpsert) bool { return st.AppName == k.app && st.UserID == k.user })
	if i < 0 {
		if _, ok := states[k]; !ok {
			var rev int64
			err := tx.QueryRowContext(ctx, `SELECT rev FROM adksession_states WHERE app_name = $1 AND user_id = $2`, k.app, k.user).Scan(&rev)
			if err != nil && !errors.Is(err, sql.ErrNoRows) {
				return fmt.Errorf("read user state revision to rebase: %w", err)
			}
			if err == nil {
				states[k] = rev
			}
		}
		b.UserStates = append(b.UserStates, StateUpsert{AppName: k.app, UserID: k.user, Rev: states[k], UpdateTime: time.Now().UTC()})
		i = len(b.UserStates) - 1
	}
	st := &b.UserStates[i]
	st.State, st.Merged = state, true
	return nil
}

// eventHeld tells whether the database holds the event of w, a write at
// or below its session row's rev: by the event's id (an older copy in Redis
// may number its own event over the database's at the very time of it:
// simulation seed 970678225580), or, for a change logged without the id
// (before the log carried it), by its time (µs), which cannot tell an event
// Redis numbered over the database's at that time from the database's.
func eventHeld(ctx context.Context, tx *sql.Tx, d *dialect, w UserWrite) (bool, error) {
	key := w.Key
	var n int
	var err error
	if w.EventID != "" {
		err = tx.QueryRowContext(ctx, d.rebind(`SELECT count(*) FROM events
WHERE app_name = ? AND user_id = ? AND session_id = ? AND id = ?`),
			key.App, key.User, key.ID, w.EventID).Scan(&n)
	} else {
		at := formatTime(time.UnixMicro(w.Ts))
		err = tx.QueryRowContext(ctx, d.rebind(`SELECT count(*) FROM events
WHERE app_name = ? AND user_id = ? AND session_id = ? AND "timestamp" >= ? AND "timestamp" <= ?`),
			key.App, key.User, key.ID, at, at).Scan(&n)
	}
	if err != nil {
		return false, fmt.Errorf("read events of %s to rebase its user: %w", key, err)
	}
	return n > 0, nil
}

// readDBSession reads what the database holds of session key, and which of
// events it holds (by id), at what times and with what content.
func readDBSession(ctx context.Context, tx *sql.Tx, d *dialect, key base.SessionRef, events []EventRow) (*dbSession, error) {
	db := &dbSession{held: map[string]time.Time{}, data: map[string][]byte{}}
	var last nullTime
	if err := tx.QueryRowContext(ctx, `SELECT count(*), max("timestamp") FROM events
WHERE app_name = $1 AND user_id = $2 AND session_id = $3`, key.App, key.User, key.ID).Scan(&db.count, &last); err != nil {
		return nil, fmt.Errorf("read events of %s to rebase: %w", key, err)
	}
	db.last = last.t
	var state stateColumn
	var updated nullTime
	err := tx.QueryRowContext(ctx, `SELECT state, update_time FROM sessions WHERE app_name = $1 AND user_id = $2 AND id = $3`,
		key.App, key.User, key.ID).Scan(&state, &updated)
	if err != nil && !errors.Is(err, sql.ErrNoRows) {
		return nil, fmt.Errorf("read %s to rebase: %w", key, err)
	}
	db.state, db.updated = state, updated.t
	err = readHeld(ctx, tx, d, key, events, func(id string, at time.Time, data []byte) {
		db.held[id], db.data[id] = at, data
	})
	if err != nil {
		return nil, err
	}
	return db, nil
}

// readHeld calls found with the id, timestamp and event_data of each of
// events that the database holds (by id) in session key.
func readHeld(ctx context.Context, tx *sql.Tx, d *dialect, key base.SessionRef, events []EventRow, found func(id string, at time.Time, data []byte)) error {
	for chunk := range slices.Chunk(events, 500) {
		q := `SELECT id, "timestamp", event_data FROM events WHERE app_name = ? AND user_id = ? AND session_id = ? AND id IN (?` +
			strings.Repeat(", ?", len(chunk)-1) + `)`
		args := []any{key.App, key.User, key.ID}
		for _, e := range chunk {
			args = append(args, e.ID)
		}
		rows, err := tx.QueryContext(ctx, d.rebind(q), args...)
		if err != nil {
			return fmt.Errorf("read event ids of %s: %w", key, err)
		}
		for rows.Next() {
			var id string
			var at dbTime
			var data []byte
			if err := rows.Scan(&id, &at, &data); err != nil {
				rows.Close()
				return fmt.Errorf("read event ids of %s: %w", key, err)
			}
			found(id, at.t, data)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return fmt.Errorf("read event ids of %s: %w", key, err)
		}
	}
	return nil
}

// cloneBatch copies b deeply enough to replace its sessions and user states.
func cloneBatch(b *Batch) *Batch {
	out := *b
	out.Sessions = slices.Clone(b.Sessions)
	out.UserStates = slices.Clone(b.UserStates)
	return &out
}

// eventDelta returns the state delta of an event in storage form (keys with
// their scope prefixes); nil when it has none or cannot be read.
func eventDelta(data []byte) map[string]json.RawMessage {
	var e struct {
		Actions struct {
			StateDelta map[string]json.RawMessage `json:"state_delta"`
		} `json:"actions"`
	}
	if json.Unmarshal(data, &e) != nil {
		return nil
	}
	return e.Actions.StateDelta
}

// The scopes of a state key, by its prefix (checked in this order: app:user:x
// is app-scoped).
const (
	scopeSession = iota
	scopeApp
	scopeUser
	scopeTemp
)

func scopeOf(key string) int {
	switch {
	case strings.HasPrefix(key, "app:"):
		return scopeApp
	case strings.HasPrefix(key, "user:"):
		return scopeUser
	case strings.HasPrefix(key, "temp:"):
		return scopeTemp
	}
	return scopeSession
}

// mergeApps merges each app snapshot of b into its row key by key, by the
// order number of the change that wrote each key (StateUpsert.Orders): a key
// takes Redis's value only when Redis's number for it is higher than the one
// the row records (or, for keys neither side numbered, when the snapshot is
// newer, as before numbers). So an older copy of the app's hash (Redis
// behind the database) never puts older values back, and a newer key of the
// row that Redis lacks is reported in b.Outcome.AppsBehind. It returns b
// with the merged snapshots (b itself is left as it is, but for its
// Outcome).
func (s *Store) mergeApps(ctx context.Context, tx *sql.Tx, b, out *Batch) (*Batch, error) {
	if len(out.AppStates) == 0 {
		return out, nil
	}
	if out == b {
		out = cloneBatch(b)
	}
	apps := out.AppStates
	out.AppStates = nil
	for _, snap := range apps {
		st := &snap
		var state stateColumn
		var rev sql.NullInt64
		var orders sql.NullString
		var updated nullTime
		err := tx.QueryRowContext(ctx, `SELECT a.state, a.update_time, t.rev, t.orders FROM app_states AS a
LEFT JOIN adksession_states AS t ON t.app_name = a.app_name AND t.user_id = ''
WHERE a.app_name = $1`+s.d.lockRow("a"), st.AppName).Scan(&state, &updated, &rev, &orders)
		if errors.Is(err, sql.ErrNoRows) {
			out.AppStates = append(out.AppStates, snap) // the first snapshot of the app: written as it is
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("read app state of %q to merge: %w", st.AppName, err)
		}
		dbOrders := map[string]int64{}
		if orders.Valid {
			_ = json.Unmarshal([]byte(orders.String), &dbOrders) // unreadable: as if unnumbered
		}
		merged, mergedOrders := maps.Clone(map[string]json.RawMessage(state)), maps.Clone(dbOrders)
		if merged == nil {
			merged = map[string]json.RawMessage{}
		}
		changed := false
		for k, v := range st.State {
			o, do := st.Orders[k], dbOrders[k]
			old, inDB := state[k]
			if o > do || (o == 0 && do == 0 && (!inDB || st.Rev > rev.Int64)) {
				changed = changed || !inDB || !bytes.Equal(old, v) || o > do
				merged[k] = v
				if o > 0 {
					mergedOrders[k] = o
				}
			}
		}
		for _, k := range slices.Sorted(maps.Keys(dbOrders)) {
			if do := dbOrders[k]; do > st.Orders[k] {
				b.Outcome.AppsBehind = append(b.Outcome.AppsBehind, AppKeyValue{App: st.AppName, Key: k, Value: state[k], Order: do})
			}
		}
		if !changed {
			continue // the row holds it all already: nothing to write
		}
		if updated.valid && updated.t.After(st.UpdateTime) {
			st.UpdateTime = updated.t
		}
		st.State, st.Orders, st.Merged, st.Rev = merged, mergedOrders, true, max(st.Rev, rev.Int64)
		out.AppStates = append(out.AppStates, snap)
	}
	return out, nil
}
