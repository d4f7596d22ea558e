package persist

import (
	"cmp"
	"maps"
	"slices"
	"time"

	"github.com/adksession/adksession/cache/base"
)

// tracked is a session's bookkeeping row (adksession_sessions).
type tracked struct {
	incarnation, rev int64
	deleted          bool
	// deletedAt is a tombstone's delete time in µs (its written_update;
	// 0 when unknown): SessionDelete.At, or for a tombstone written before
	// it was recorded, the last update time written before the delete.
	deletedAt int64
}

// stateKey names an app_states (user "") or user_states row.
type stateKey struct{ app, user string }

// trackedRow is a bookkeeping row to write.
type trackedRow struct {
	key base.SessionRef
	tracked
}

// plan is what a batch writes once it is decided against the bookkeeping
// rows: only what applies, one entry per key, sorted by key.
type plan struct {
	purge       []base.SessionRef // sessions rows to delete, with their events
	sessions    []*SessionUpsert  // sessions rows to upsert
	events      []EventRow        // events to insert, Key set to their session
	tracked     []trackedRow
	ensureApps  []stateSeed // app_states rows to create as {} if missing
	ensureUsers []stateSeed // user_states rows to create as {} if missing
	appStates   []*StateUpsert
	userStates  []*StateUpsert
	stateRevs   []stateRev // adksession_states rows to write
	// known are the upserted sessions whose row of the same incarnation is
	// in the database already (ApplyEach writes their events even when it
	// cannot write their row).
	known map[base.SessionRef]bool
	// conflicts are the events of the upserts that do not apply because
	// the database deleted their session (or holds a later incarnation):
	// acknowledged by an older copy in Redis, they are dead-lettered.
	conflicts []Conflict
}

// stateSeed is an app_states or user_states row to create as {}.
type stateSeed struct {
	key  stateKey
	time time.Time
}

type stateRev struct {
	key     stateKey
	rev     int64
	flushes int64            // the flush count of the Redis hash the row was read from (StateUpsert.Flush)
	orders  map[string]int64 // an app's key orders (StateUpsert.Orders); nil keeps the recorded ones
}

// planBatch decides which parts of b apply, given the bookkeeping rows of
// its keys (absent = untracked). The rules (docs/persistence.md):
//   - a delete applies unless a later incarnation is tracked; it removes the
//     row and tracks a tombstone keeping the tracked rev;
//   - an upsert applies when untracked, for a later incarnation (removing the
//     earlier one's rows first), or for the tracked live incarnation at the
//     same or a later rev; otherwise nothing of it is written;
//   - a state snapshot applies when untracked or at a later rev.
//
// The events of an upsert whose session the database deleted (at the same
// incarnation) or holds at a later one are reported in p.conflicts: Redis
// came back with an older copy of the session, and an event it acknowledged
// after the delete (or the new create) cannot be written.
func planBatch(b *Batch, sessions map[base.SessionRef]tracked, states map[stateKey]int64) *plan {
	cur := maps.Clone(sessions)
	if cur == nil {
		cur = map[base.SessionRef]tracked{}
	}
	purge := map[base.SessionRef]bool{}
	upserts := map[base.SessionRef]*SessionUpsert{}
	events := map[base.SessionRef][]EventRow{}
	touched := map[base.SessionRef]bool{}
	known := map[base.SessionRef]bool{}
	var conflicts []Conflict

	for _, d := range b.Deletes {
		t, ok := cur[d.Key]
		if ok && t.incarnation > d.Incarnation {
			continue
		}
		purge[d.Key] = true
		cur[d.Key] = tracked{incarnation: d.Incarnation, rev: t.rev, deleted: true, deletedAt: d.At}
		touched[d.Key] = true
	}
	for i := range b.Sessions {
		u := &b.Sessions[i]
		t, ok := cur[u.Key]
		switch {
		case !ok:
		case u.Incarnation > t.incarnation:
			purge[u.Key] = true
			delete(events, u.Key) // an earlier incarnation's, from this batch
		case u.Incarnation == t.incarnation && !t.deleted && u.Rev >= t.rev:
		default:
			after := int64(0)
			switch {
			case u.Incarnation < t.incarnation:
				after = t.incarnation // the later incarnation's create time
			case t.deleted:
				after = t.deletedAt
			}
			if after > 0 {
				for _, e := range u.Events {
					conflicts = appendConflict(conflicts, u.Key, e, after, ReasonDeleted)
				}
			}
			continue
		}
		upserts[u.Key] = u
		if t0, ok := sessions[u.Key]; ok && t0.incarnation == u.Incarnation && !t0.deleted && !purge[u.Key] {
			known[u.Key] = true
		}
		events[u.Key] = append(events[u.Key], u.Events...)
		cur[u.Key] = tracked{incarnation: u.Incarnation, rev: u.Rev}
		touched[u.Key] = true
	}

	p := &plan{purge: sortedKeys(purge, compareSessionKeys), known: known, conflicts: conflicts}
	apps := map[stateKey]time.Time{}
	users := map[stateKey]time.Time{}
	for _, v := range b.Voided {
		seed(apps, stateKey{app: v.Key.App}, v.Created)
		seed(users, stateKey{app: v.Key.App, user: v.Key.User}, v.Created)
	}
	for _, k := range sortedKeys(upserts, compareSessionKeys) {
		u := upserts[k]
		p.sessions = append(p.sessions, u)
		for _, e := range events[k] {
			e.Key = k
			p.events = append(p.events, e)
		}
		seed(apps, stateKey{app: k.App}, u.CreateTime)
		seed(users, stateKey{app: k.App, user: k.User}, u.CreateTime)
	}
	for _, k := range sortedKeys(touched, compareSessionKeys) {
		p.tracked = append(p.tracked, trackedRow{key: k, tracked: cur[k]})
	}
	for _, k := range sortedKeys(apps, compareStateKeys) {
		p.ensureApps = append(p.ensureApps, stateSeed{key: k, time: apps[k]})
	}
	for _, k := range sortedKeys(users, compareStateKeys) {
		p.ensureUsers = append(p.ensureUsers, stateSeed{key: k, time: users[k]})
	}
	p.appStates = planStates(b.AppStates, states, &p.stateRevs)
	p.userStates = planStates(b.UserStates, states, &p.stateRevs)
	slices.SortFunc(p.stateRevs, func(a, b stateRev) int { return compareStateKeys(a.key, b.key) })
	return p
}

// planStates keeps, per key, the latest snapshot of in that is newer than
// the tracked rev, and records the revs to track in revs: with each, the
// greatest flush count read of the key. A user's snapshot that is not
// written (not newer) still has its count recorded, at the tracked rev:
// its read was counted in Redis (state_read.lua), and a copy of the hash
// Redis comes back with from before that read must count at or below the
// database's to be found older (docs/design.md, "Redis behind the
// database"; simulation seed 999150698881).
func planStates(in []StateUpsert, tracked map[stateKey]int64, revs *[]stateRev) []*StateUpsert {
	latest := map[stateKey]*StateUpsert{}
	counts := map[stateKey]int64{}
	for i := range in {
		s := &in[i]
		k := stateKey{app: s.AppName, user: s.UserID}
		counts[k] = max(counts[k], s.Flush)
		if rev, ok := tracked[k]; ok && s.Rev <= rev && !s.Merged {
			continue
		}
		if l, ok := latest[k]; !ok || s.Rev >= l.Rev {
			latest[k] = s
		}
	}
	var out []*StateUpsert
	for _, k := range sortedKeys(counts, compareStateKeys) {
		l, ok := latest[k]
		switch {
		case ok:
			out = append(out, l)
			*revs = append(*revs, stateRev{key: k, rev: l.Rev, flushes: counts[k], orders: l.Orders})
		case counts[k] > 0:
			*revs = append(*revs, stateRev{key: k, rev: tracked[k], flushes: counts[k]})
		}
	}
	return out
}

// seed records t as the time of k's {} row unless an earlier one is recorded.
func seed(m map[stateKey]time.Time, k stateKey, t time.Time) {
	if old, ok := m[k]; !ok || t.Before(old) {
		m[k] = t
	}
}

func sortedKeys[K comparable, V any](m map[K]V, cmp func(a, b K) int) []K {
	return slices.SortedFunc(maps.Keys(m), cmp)
}

func compareSessionKeys(a, b base.SessionRef) int {
	return cmp.Or(cmp.Compare(a.App, b.App), cmp.Compare(a.User, b.User), cmp.Compare(a.ID, b.ID))
}

func compareStateKeys(a, b stateKey) int {
	return cmp.Or(cmp.Compare(a.app, b.app), cmp.Compare(a.user, b.user))
}
