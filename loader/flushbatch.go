package loader

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/adksession/adksession/cache"
	"github.com/adksession/adksession/cache/base"
	"github.com/adksession/adksession/cache/eventjson"
	"github.com/adksession/adksession/persist"
)

// sessionChanges are one session's entries of a batch, in log order.
type sessionChanges struct {
	key     base.SessionRef
	changes []cache.Change
	// carried: the log entries (cache.Change.ID) of the appends whose
	// events the batch's read of the session returned (addSession).
	carried map[string]bool
}

func groupChanges(changes []cache.Change) []*sessionChanges {
	var out []*sessionChanges
	idx := map[base.SessionRef]*sessionChanges{}
	for _, c := range changes {
		k := c.SessionRef
		g := idx[k]
		if g == nil {
			g = &sessionChanges{key: k}
			idx[k] = g
			out = append(out, g)
		}
		g.changes = append(g.changes, c)
	}
	return out
}

// putBackApps writes into Redis the app keys the database holds newer than
// Redis's copy (Outcome.AppsBehind: Redis came back holding an older copy
// of the app's hash), one idempotent app change per order number: a key is
// written only where no change with a higher number wrote it since.
func (f *Flusher) putBackApps(ctx context.Context, keys []persist.AppKeyValue) error {
	type change struct {
		app   string
		order int64
	}
	pairs := map[change][]cache.Pair{}
	var order []change
	for _, k := range keys {
		c := change{k.App, k.Order}
		if _, ok := pairs[c]; !ok {
			order = append(order, c)
		}
		pairs[c] = append(pairs[c], cache.Pair{Key: k.Key, Value: string(k.Value)})
	}
	for _, c := range order {
		id := fmt.Sprintf("db/%d", c.order)
		err := f.opts.AppState.ApplyApp(ctx, c.app, cache.AppChange{ID: id, Order: c.order, Pairs: pairs[c], Repair: true})
		if err != nil && !errors.Is(err, cache.ErrAppOrderLost) {
			return fmt.Errorf("put back app %s keys newer in the database: %w", c.app, err)
		}
	}
	return nil
}

// repairAppState applies the app deltas of the batch's entries to Redis
// again: a no-op for those their writer applied, the repair for a writer
// that failed between its two steps. The repair goes by the order number
// the change was logged with, so it never writes over a newer value
// (docs/design.md, "App state"); a change whose number Redis no longer
// knows how to order is skipped (its writer never acknowledged it).
func (f *Flusher) repairAppState(ctx context.Context, changes []cache.Change) error {
	for _, c := range changes {
		if c.AppDelta == nil {
			continue
		}
		id := cache.AppendChangeID(c.Incarnation, c.User, c.ID, c.EventID)
		if c.Kind == base.ChangeCreate {
			id = cache.CreateChangeID(c.Incarnation, c.User, c.ID)
		}
		err := f.opts.AppState.ApplyApp(ctx, c.App, cache.AppChange{ID: id, Order: c.AppOrder, Pairs: c.AppDelta, Repair: true})
		switch {
		case errors.Is(err, cache.ErrAppOrderLost):
			f.opts.Logger.Warn("adksession flusher: app: step of an unacknowledged change skipped, its order is lost",
				"app", c.App, "change", id)
		case err != nil:
			return err
		}
	}
	return nil
}

// shardBatch is one batch of a shard's change log: what it writes, what to
// record in Redis once it is committed, and what is dead-lettered. What
// cannot be read from Redis is dead-lettered while the batch is built; what
// the database refuses, by reject.
type shardBatch struct {
	shard int
	ids   []string // every entry read, flushed or dead-lettered: all are acknowledged
	batch *persist.Batch
	marks []cache.Flushed
	dead  []cache.DeadLetter
	// deadStates are the user and app state revisions dead-lettered.
	deadStates []persist.StateUpsert

	groups    map[base.SessionRef]*sessionChanges
	markOf    map[base.SessionRef][]int               // indexes in marks of a session's marks
	userMark  map[base.StateOwner]int                 // index in marks of the mark carrying a user's revision
	events    map[base.SessionRef]map[int64]string    // JSON of the events read, by seq
	states    map[base.StateOwner]persist.StateUpsert // the state snapshots of the batch (user "" for an app)
	carriers  map[base.StateOwner]cache.Change        // a change of the batch that carried each state
	deadEntry map[string]bool                         // ids of changes dead-lettered
	written   map[base.SessionRef]int                 // events written per session
	refused   map[base.StateOwner]bool                // states dead-lettered in this batch
	logPos    map[string]int                          // position of each change in the log, by id
	lastEntry string                                  // id of the last entry read (the newest of the batch)
}

// dead-letters c as unit unit unless it is already.
func (sb *shardBatch) deadLetter(c cache.Change, unit, reason string, data map[string]any) {
	if sb.deadEntry[c.EntryID] {
		return
	}
	sb.deadEntry[c.EntryID] = true
	sb.dead = append(sb.dead, cache.DeadLetter{Change: c, Unit: unit, Reason: reason, Data: data})
}

// changeOf returns the change of g that carries the event seq (or the
// event at ts), else g's last change.
// copiedEvent tells whether the event at seq of the session's incarnation
// inc is a fork's copy (cache.Change.Copied): its entry c says so, or the
// batch holds the fork's create, which counts its copies.
func copiedEvent(g *sessionChanges, c cache.Change, inc, seq int64) bool {
	if c.Kind == base.ChangeAppend && c.Seq == seq {
		return c.Copied > 0
	}
	for _, cc := range g.changes {
		if cc.Kind == base.ChangeCreate && cc.Incarnation == inc && seq <= cc.Copied {
			return true
		}
	}
	return false
}

// entryOf is the change-log entry of the event read at seq with id: the
// append at that seq that names id. An older copy in Redis may have
// numbered its own event over one logged before at the same seq, so the
// seq alone can name another event's entry (simulation seed 547085383959:
// the copy's event took the position of the first entry of the batch, the
// lost event's it numbered over, and a rebased user took its write before
// the writes logged before it). ok is false when the batch holds no entry
// naming id: the event was logged after the batch read the log, or logged
// without its id, which the log carries for every event with user: or app:
// keys, the only ones whose place among the batch's writes matters.
func entryOf(g *sessionChanges, seq int64, id string) (c cache.Change, ok bool) {
	for _, cc := range g.changes {
		if cc.Kind == base.ChangeAppend && cc.Seq == seq && id != "" && cc.EventID == id {
			return cc, true
		}
	}
	return c, false
}

func changeOf(g *sessionChanges, seq, ts int64) cache.Change {
	for _, c := range g.changes {
		if c.Kind == base.ChangeAppend && (c.Seq == seq || (seq < 0 && c.Ts == ts)) {
			return c
		}
	}
	return g.changes[len(g.changes)-1]
}

// buildBatch reads what the sessions of changes are now in Redis and makes
// the batch that writes them. A session or an event that cannot be read is
// dead-lettered; the rest of the batch goes on.
func (f *Flusher) buildBatch(ctx context.Context, shard int, changes []cache.Change, bad []cache.DeadLetter) (*shardBatch, error) {
	sb := &shardBatch{shard: shard, batch: &persist.Batch{}, dead: bad, groups: map[base.SessionRef]*sessionChanges{},
		markOf: map[base.SessionRef][]int{}, userMark: map[base.StateOwner]int{}, events: map[base.SessionRef]map[int64]string{},
		states: map[base.StateOwner]persist.StateUpsert{}, carriers: map[base.StateOwner]cache.Change{}, deadEntry: map[string]bool{},
		written: map[base.SessionRef]int{}, refused: map[base.StateOwner]bool{}, logPos: map[string]int{}}
	for i, c := range changes {
		sb.logPos[c.EntryID] = i
		sb.lastEntry = c.EntryID
	}
	for _, d := range bad {
		sb.ids = append(sb.ids, d.Change.EntryID)
		sb.deadEntry[d.Change.EntryID] = true
	}
	b := sb.batch
	var refs []cache.FlushRef
	var upserts []*sessionChanges
	apps := map[string]cache.Change{}
	var deleted []*sessionChanges // groups with a delete
	for _, g := range groupChanges(changes) {
		sb.groups[g.key] = g
		for _, c := range g.changes {
			sb.ids = append(sb.ids, c.EntryID)
			if c.AppDelta != nil {
				apps[c.App] = c // also of changes a later delete voids: app state stays
			}
		}
		live := g.changes
		for i := len(g.changes) - 1; i >= 0; i-- {
			if c := g.changes[i]; c.Kind == base.ChangeDelete {
				b.Deletes = append(b.Deletes, persist.SessionDelete{Key: g.key, Incarnation: c.Incarnation, At: loggedAt(c.EntryID)})
				for _, v := range g.changes[:i] {
					if v.Kind == base.ChangeCreate {
						b.Voided = append(b.Voided, persist.VoidedCreate{Key: g.key, Created: time.UnixMicro(v.Incarnation).UTC()})
					}
				}
				sb.addMark(g.key, cache.Flushed{SessionRef: c.SessionRef, Incarnation: c.Incarnation, Seq: -1, Deleted: true, UserRev: -1})
				deleted = append(deleted, g)
				live = g.changes[i+1:]
				sb.addUserWrites(g.changes[:i], nil)
				break
			}
		}
		if len(live) == 0 {
			continue
		}
		last := live[len(live)-1]
		ref := cache.FlushRef{SessionRef: last.SessionRef, Incarnation: last.Incarnation, MinTs: 1, MaxTs: 0}
		for _, c := range live {
			if c.Incarnation != last.Incarnation {
				continue
			}
			ref.Create = ref.Create || c.Kind == base.ChangeCreate
			if c.Kind != base.ChangeAppend {
				continue
			}
			if ref.MinTs > ref.MaxTs {
				ref.MinTs, ref.MaxTs = c.Ts, c.Ts
			}
			ref.MinTs, ref.MaxTs = min(ref.MinTs, c.Ts), max(ref.MaxTs, c.Ts)
		}
		refs = append(refs, ref)
		upserts = append(upserts, &sessionChanges{key: g.key, changes: live})
	}
	reads, err := f.cache.ReadForFlush(ctx, refs)
	if err != nil {
		return nil, err
	}
	for i, r := range reads {
		sb.addSession(refs[i], upserts[i], r)
		if r.Err == nil {
			// A create's user: keys are in no event; the events of a
			// session gone since the log was read are in none of the batch,
			// nor are those Redis lost since (an older copy of the
			// session's keys put back, the user's hash kept: their writes
			// are acknowledged deltas the user holds).
			sb.addUserWrites(upserts[i].changes, upserts[i].carried)
		}
	}
	// The user state that deleted sessions changed stays (as app state
	// does): write it even when no live session of the user is in the batch.
	for _, g := range deleted {
		uk := base.StateOwner{App: g.key.App, User: g.key.User}
		if _, ok := sb.carriers[uk]; ok {
			continue
		}
		st, err := f.cache.UserStateRev(ctx, g.key.App, g.key.User)
		if err != nil {
			return nil, err
		}
		if sb.addUser(uk.App, uk.User, g, st, time.Now().UTC()) {
			sb.userMark[uk] = sb.markOf[g.key][0]
			sb.marks[sb.userMark[uk]].UserRev, sb.marks[sb.userMark[uk]].UserFlush = st.Rev, st.Flush
		}
	}
	for app, c := range apps {
		st, err := f.cache.AppStateRev(ctx, app)
		if err != nil {
			return nil, err
		}
		if u, ok := appStateUpsert(app, st); ok {
			sb.addState(base.StateOwner{App: app}, c, u)
		}
	}
	return sb, nil
}

// appStateUpsert is the row a flush writes of app's state as Redis holds it
// (st); false when there is none to write (not cached, or dead-lettered up
// to its revision).
func appStateUpsert(app string, st cache.StateRev) (persist.StateUpsert, bool) {
	if !st.OK || st.Dead >= st.Rev {
		return persist.StateUpsert{}, false
	}
	return persist.StateUpsert{AppName: app, Rev: st.Rev, State: rawState(st.State), UpdateTime: time.Now().UTC(), Orders: st.Orders}, true
}

// WriteAppState writes app's state as Redis (rd) holds it into db as a
// flush does, merged key by key by order number (an older copy never puts
// older values back): for an app: step no change-log entry carries, a
// retry's of a change the flusher's repair skipped.
func WriteAppState(ctx context.Context, db FlushDatabase, rd batchReader, app string) error {
	st, err := rd.AppStateRev(ctx, app)
	if err != nil {
		return fmt.Errorf("write app state of %s: %w", app, err)
	}
	u, ok := appStateUpsert(app, st)
	if !ok {
		return nil
	}
	return db.Apply(ctx, &persist.Batch{AppStates: []persist.StateUpsert{u}})
}

// addUserWrites adds to the batch the user: writes of changes that no
// event of the batch carries (Batch.UserWrites): those of creates, and those
// of appends whose entries carried does not name (nil: none).
func (sb *shardBatch) addUserWrites(changes []cache.Change, carried map[string]bool) {
	for _, c := range changes {
		if c.UserDelta == nil || (c.Kind != base.ChangeCreate && (c.Kind != base.ChangeAppend || carried[c.EntryID])) {
			continue
		}
		w := persist.UserWrite{Key: c.SessionRef, Incarnation: c.Incarnation,
			LogPos: sb.logPos[c.EntryID], Delta: make(map[string]json.RawMessage, len(c.UserDelta))}
		if c.Kind == base.ChangeAppend {
			w.Seq, w.Ts, w.EventID = c.Seq, c.Ts, c.EventID
		}
		for _, p := range c.UserDelta {
			w.Delta[p.Key] = json.RawMessage(p.Value)
		}
		sb.batch.UserWrites = append(sb.batch.UserWrites, w)
	}
}

func (sb *shardBatch) addMark(k base.SessionRef, m cache.Flushed) {
	sb.marks = append(sb.marks, m)
	sb.markOf[k] = append(sb.markOf[k], len(sb.marks)-1)
}

func (sb *shardBatch) addState(k base.StateOwner, carrier cache.Change, st persist.StateUpsert) {
	sb.carriers[k] = carrier
	sb.states[k] = st
	if k.IsApp() {
		sb.batch.AppStates = append(sb.batch.AppStates, st)
	} else {
		sb.batch.UserStates = append(sb.batch.UserStates, st)
	}
}

// addSession adds what was read of one session (its live changes g) to the
// batch.
func (sb *shardBatch) addSession(ref cache.FlushRef, g *sessionChanges, r cache.FlushRead) {
	if r.Err != nil {
		for _, c := range g.changes {
			sb.deadLetter(c, cache.DeadSession, r.Err.Error(), map[string]any{"events_written": false})
		}
		sb.carryUser(ref, g, r.User)
		return
	}
	if r.Snap == nil {
		// Deleted or created again since: later entries carry the session.
		// A create among this batch's changes still made its app's and
		// user's state rows, as ADK's create does: the later delete's batch
		// cannot void it (the create is not in it), so it is voided here.
		if ref.Create {
			sb.batch.Voided = append(sb.batch.Voided, persist.VoidedCreate{Key: g.key, Created: time.UnixMicro(ref.Incarnation).UTC()})
		}
		sb.carryUser(ref, g, r.User)
		return
	}
	up := persist.SessionUpsert{
		Key: g.key, Incarnation: ref.Incarnation,
		State: rawState(r.Snap.State), Flushed: r.Snap.Flushed, Rebase: r.Snap.Rebase,
		CreateTime: time.UnixMicro(r.Snap.CreateTime).UTC(), UpdateTime: time.UnixMicro(r.Snap.UpdateTime).UTC(),
	}
	if r.CreateState != "" {
		if err := json.Unmarshal([]byte(r.CreateState), &up.CreateState); err != nil {
			for _, c := range g.changes {
				sb.deadLetter(c, cache.DeadSession, fmt.Sprintf("create-time state of %s: %v", ref.String(), err),
					map[string]any{"events_written": false})
			}
			return
		}
	}
	// The row's rev is the last seq of an event the read returned (or that
	// it returned unreadable), not the last of the entries: when Redis came
	// back older between the read of the log and this read, the copy lacks
	// the events of the newest entries (lost with Redis), and claiming their
	// seqs would write the older copy's state over the database's at a rev
	// above the row's (TestBatchReadAcrossOlderCopy).
	seq := int64(0)
	for _, b := range r.BadEvents {
		if c := changeOf(g, -1, b.Ts); c.Kind == base.ChangeAppend && c.Ts == b.Ts && c.Incarnation == ref.Incarnation {
			seq = max(seq, c.Seq)
		}
	}
	sb.events[g.key] = map[int64]string{}
	for _, e := range r.Events {
		seq = max(seq, e.Seq)
		row, err := eventRow(g.key, e)
		if err != nil {
			sb.deadLetter(changeOf(g, e.Seq, e.Ts), cache.DeadEvent, err.Error(), map[string]any{"seq": e.Seq, "event": e.JSON})
			continue
		}
		c, logged := entryOf(g, e.Seq, row.ID)
		row.LogPos = len(sb.logPos) // logged after the batch read the log: after every entry it holds
		if logged {
			row.LogPos = sb.logPos[c.EntryID]
		} else {
			c = changeOf(g, e.Seq, e.Ts)
		}
		row.Copied = copiedEvent(g, c, ref.Incarnation, e.Seq)
		up.Events = append(up.Events, row)
		sb.events[g.key][e.Seq] = e.JSON
	}
	for _, e := range r.BadEvents {
		sb.deadLetter(changeOf(g, -1, e.Ts), cache.DeadEvent, fmt.Sprintf("event of %s: %v", ref.String(), e.Err),
			map[string]any{"member": e.Member})
	}
	g.carried = carriedAppends(g, up.Events)
	// The row's revision is the last event the database holds after this
	// batch, not the one Redis had when the session was read (appends may
	// have come since, their entries in a later batch): readers number the
	// database's events back from it.
	up.Rev = seq
	sb.written[g.key] = len(up.Events)
	sb.batch.Sessions = append(sb.batch.Sessions, up)
	userRev := int64(-1)
	if sb.addUser(ref.App, ref.User, g, r.User, up.UpdateTime) {
		userRev = r.User.Rev
		sb.userMark[base.StateOwner{App: ref.App, User: ref.User}] = len(sb.marks)
	}
	lastID := ""
	for _, e := range up.Events {
		if e.Seq == seq {
			lastID = e.ID
		}
	}
	userFlush := int64(0)
	if userRev >= 0 {
		userFlush = r.User.Flush
	}
	sb.addMark(g.key, cache.Flushed{SessionRef: ref.SessionRef, Incarnation: ref.Incarnation, Seq: seq, UserRev: userRev,
		Hold: -heldChanges(g.changes), EventID: lastID, UserFlush: userFlush})
}

// carriedAppends names the appends of g whose events the batch writes
// (rows): the others' user: writes (events Redis lost since, or read and
// dead-lettered) reach a rebased user as UserWrites. An entry is its
// event's when the seq and time match and, when the entry names its event,
// the id: an older copy of the session numbers its new events over the ones
// it lost, at their very time at times (simulation seed 970678225580).
func carriedAppends(g *sessionChanges, rows []persist.EventRow) map[string]bool {
	bySeq := make(map[int64]*persist.EventRow, len(rows))
	for i := range rows {
		bySeq[rows[i].Seq] = &rows[i]
	}
	carried := make(map[string]bool, len(rows))
	for _, c := range g.changes {
		if row := bySeq[c.Seq]; c.Kind == base.ChangeAppend && row != nil &&
			row.Timestamp.UnixMicro() == c.Ts && (c.EventID == "" || c.EventID == row.ID) {
			carried[c.EntryID] = true
		}
	}
	return carried
}

// addUser adds user state st, read with a session of g, to the batch at
// update time at, unless the batch carries the user's state already or
// there is nothing to write (Redis holds no hash, or its revision was
// dead-lettered). It reports whether it added it.
func (sb *shardBatch) addUser(app, user string, g *sessionChanges, st cache.StateRev, at time.Time) bool {
	uk := base.StateOwner{App: app, User: user}
	if _, done := sb.carriers[uk]; done || !st.OK || st.Dead >= st.Rev {
		return false
	}
	sb.addState(uk, g.changes[len(g.changes)-1], persist.StateUpsert{AppName: app, UserID: user, Rev: st.Rev,
		State: rawState(st.State), UpdateTime: at, Rebase: st.Rebase, Flush: st.Flush, Recorded: st.Recorded, LogTail: st.LogTail})
	return true
}

// carryUser adds the user state read with a session the batch writes
// nothing of (gone, created again, or unreadable) when no other session of
// the batch carries it, with a mark of its own that names no seq (so
// flushed.lua leaves the session's keys alone). The read was counted
// (state_read.lua): the database must compare the count and record it, or
// a copy of the hash Redis came back with would not be found older, and
// writes the batch holds no event of (Batch.UserWrites) would not reach a
// user Redis is behind (simulation seed 999150698881).
func (sb *shardBatch) carryUser(ref cache.FlushRef, g *sessionChanges, st cache.StateRev) {
	if !sb.addUser(ref.App, ref.User, g, st, time.Now().UTC()) {
		return
	}
	sb.userMark[base.StateOwner{App: ref.App, User: ref.User}] = len(sb.marks)
	sb.addMark(g.key, cache.Flushed{SessionRef: ref.SessionRef, Incarnation: ref.Incarnation, Seq: -1,
		UserRev: st.Rev, UserFlush: st.Flush})
}

// heldChanges counts the retried entries of changes that hold their
// session (cache.Change.Held): written, each releases one hold.
func heldChanges(changes []cache.Change) int {
	n := 0
	for _, c := range changes {
		if c.Held {
			n++
		}
	}
	return n
}

// rebased records in the marks what the database found out of step with
// it (Outcome): a rebased session's marks, and one mark of each rebased
// user (the one carrying its revision when there is one); and in each
// session's marks the update time its row got.
func (sb *shardBatch) rebased(o persist.Outcome) {
	for k, ut := range o.Updated {
		for _, i := range sb.markOf[k] {
			if !sb.marks[i].Deleted {
				sb.marks[i].UpdateTime = ut.UnixMicro()
			}
		}
	}
	for _, k := range o.Rebased {
		for _, i := range sb.markOf[k] {
			sb.marks[i].Rebased = true
		}
	}
	for _, u := range o.RebasedUsers {
		uk := base.StateOwner{App: u.App, User: u.User}
		i, ok := sb.userMark[uk]
		if !ok {
			i = slices.IndexFunc(sb.marks, func(m cache.Flushed) bool { return m.App == u.App && m.User == u.User })
		}
		if i < 0 {
			continue
		}
		sb.marks[i].UserRebased = true
		// The database got its state plus the deltas this batch carries.
		// A hash read while later changes were logged holds their deltas
		// too, which later batches carry: it is not marked flushed (so it
		// is not let go of) but kept rebasing (m:rb) until a batch reads
		// it with nothing logged after its own entries.
		if st, ok := sb.states[uk]; !ok || st.LogTail != sb.lastEntry {
			sb.marks[i].UserRev, sb.marks[i].UserFlush = -1, 0
		}
	}
}

// eventRow makes the events row of a cached event: one parse of its JSON
// gives the storage form and the id and invocation id.
func eventRow(k base.SessionRef, e cache.EventRecord) (persist.EventRow, error) {
	id, inv, data, err := eventjson.StorageEvent([]byte(e.JSON))
	if err != nil {
		return persist.EventRow{}, fmt.Errorf("event %d of %s: %w", e.Seq, k, err)
	}
	return persist.EventRow{Key: k, ID: id, InvocationID: inv, Timestamp: time.UnixMicro(e.Ts).UTC(), Seq: e.Seq, Data: data}, nil
}

// reject dead-letters what the database refused (ApplyEach) and keeps the
// Redis marks from claiming it flushed: a refused session's keys keep no
// TTL (its events may be written all the same), a refused state's revision
// is recorded as dead-lettered (its hash keeps no TTL either). A refused
// event is kept in its dead letter; its session is marked flushed past it.
func (sb *shardBatch) reject(rejected []persist.Rejected) {
	for _, r := range rejected {
		switch r.Unit {
		case persist.UnitSession:
			for _, i := range sb.markOf[r.Key] {
				sb.marks[i].Seq, sb.marks[i].Deleted = -1, false
			}
			if !r.EventsWritten {
				sb.written[r.Key] = 0
			}
			changes := sb.groups[r.Key].changes
			dead := 0
			for _, c := range changes {
				if !sb.deadEntry[c.EntryID] {
					dead++
				}
				sb.deadLetter(c, cache.DeadSession, r.Err.Error(), map[string]any{"events_written": r.EventsWritten})
			}
			// Letters whose events were not written hold the session's keys
			// (no TTL, no trim) until they are retried and written, or dropped.
			if m := sb.markOf[r.Key]; len(m) > 0 && !r.EventsWritten {
				sb.marks[m[len(m)-1]].Hold = dead - heldChanges(changes)
			}
		case persist.UnitEvent:
			g := sb.groups[r.Key]
			sb.written[r.Key]--
			sb.deadLetter(changeOf(g, r.Seq, 0), cache.DeadEvent, r.Err.Error(),
				map[string]any{"seq": r.Seq, "event": sb.events[r.Key][r.Seq]})
		case persist.UnitUserState, persist.UnitAppState:
			k := base.StateOwner{App: r.Key.App, User: r.Key.User}
			if sb.refused[k] {
				continue
			}
			sb.refused[k] = true
			if i, ok := sb.userMark[k]; ok {
				sb.marks[i].UserRev = -1
			}
			st, ok := sb.states[k]
			carrier := sb.carriers[k]
			if !ok { // only its {} row was refused: record it once per batch
				carrier = sb.anyChangeOf(k)
			} else {
				sb.deadStates = append(sb.deadStates, st)
			}
			unit := cache.DeadUserState
			if r.Unit == persist.UnitAppState {
				unit = cache.DeadAppState
			}
			// The record holds the state as Redis does (values may not be JSON).
			state := map[string]string{}
			for key, v := range st.State {
				state[key] = string(v)
			}
			sb.dead = append(sb.dead, cache.DeadLetter{Change: carrier, Unit: unit, Reason: r.Err.Error(),
				Data: map[string]any{"rev": st.Rev, "state": state}})
		}
	}
}

// conflicts dead-letters the acknowledged events the database could not
// take (Outcome.Conflicts): the database keeps what it holds, and the
// letter keeps the event as Redis held it. A conflict whose change was
// logged before its After (an older copy's log replaying what the database
// removed since) is none. The session is marked flushed past the event, as
// past one the database refused.
func (sb *shardBatch) conflicts(cs []persist.Conflict) {
	for _, x := range cs {
		g := sb.groups[x.Key]
		if g == nil {
			continue
		}
		c := changeOf(g, x.Seq, 0)
		if c.Kind != base.ChangeAppend || c.Seq != x.Seq || sb.deadEntry[c.EntryID] || (x.After > 0 && loggedAt(c.EntryID) <= x.After) {
			continue
		}
		sb.written[x.Key]--
		sb.deadLetter(c, cache.DeadEvent, x.Reason, map[string]any{"seq": x.Seq, "event_id": x.EventID,
			"event": sb.events[x.Key][x.Seq], "conflict": true})
	}
}

// loggedAt is the time in µs a change-log entry id (<ms>-<n>) names; 0
// when it names none.
func loggedAt(id string) int64 {
	ms, _, _ := strings.Cut(id, "-")
	n, err := strconv.ParseInt(ms, 10, 64)
	if err != nil || n < 0 || n > math.MaxInt64/1000 {
		return 0
	}
	return n * 1000
}

// anyChangeOf returns a change of the batch of owner k (of any user of the app when k is the app).
func (sb *shardBatch) anyChangeOf(k base.StateOwner) cache.Change {
	for key, g := range sb.groups {
		if key.App == k.App && (k.IsApp() || key.User == k.User) {
			return g.changes[len(g.changes)-1]
		}
	}
	return cache.Change{}
}

// eventsWritten counts the events the batch wrote.
func (sb *shardBatch) eventsWritten() int {
	n := 0
	for _, w := range sb.written {
		n += w
	}
	return n
}

func rawState(m map[string]string) map[string]json.RawMessage {
	out := make(map[string]json.RawMessage, len(m))
	for k, v := range m {
		out[k] = json.RawMessage(v)
	}
	return out
}
