package sim

// Redis behind the database (docs/design.md, "Redis behind the database";
// docs/simulation.md, "Faults"): Redis restarted from an RDB snapshot older
// than the last flush, a failover to a replica held behind (hold_test.go),
// an old copy of a session's keys put back, and ADK Python appending rows to
// the database between the service's writes.

import (
	"cmp"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

// snapshot is Redis's state taken by a snapshot fault, until its regress.
type snapshot struct {
	mode  string            // "rdb": the whole Redis (SAVE); "hold": a shard's replica; "dump": one session's keys
	key   sessKey           // dump: the session
	dumps map[string]string // dump: key -> DUMP (absent keys are not in it)
	keys  []string          // dump: the keys put back
	lens  map[sessKey]int   // events each session had when it was taken
	temps map[sessKey]mTemp // the temp state each session had then
	// hold: the shard's master and its replica, stopped since, and the
	// sessions the shard serves (the others' keys do not go back)
	master, replica string
	shard           map[sessKey]bool
}

// whole tells whether the snapshot is of every session (the whole Redis, or
// a shard of the cluster: the model does not follow which sessions it holds).
func (s *snapshot) whole() bool { return s.mode == "rdb" || s.mode == "hold" }

// held is the replica a hold snapshot stopped ("" when none).
func (d *driver) held() (master, replica string) {
	d.snapMu.Lock()
	defer d.snapMu.Unlock()
	if d.snap == nil {
		return "", ""
	}
	return d.snap.master, d.snap.replica
}

// blocked tells whether creates and deletes of k wait for the regress: the
// model follows a session whose incarnation Redis and the database agree on
// (a delete a regressed Redis undoes is not covered, docs/design.md).
func (d *driver) blocked(k sessKey) bool {
	d.snapMu.Lock()
	defer d.snapMu.Unlock()
	return d.snap != nil && (d.snap.whole() || d.snap.key == k)
}

// takeSnapshot takes Redis's state (test goroutine; every client that could
// touch what it takes has settled): SAVE; a replica of the master of client
// 0's session slot held; or DUMP of the keys of that session (its user hash
// too in the single mode: in the concurrent mode other clients write that
// hash meanwhile, and read their keys exactly).
func (d *driver) takeSnapshot(ctx context.Context, mode string, slot int) error {
	snap := &snapshot{mode: mode, lens: map[sessKey]int{}, temps: map[sessKey]mTemp{}}
	if d.snap != nil {
		// A checkpoint's snapshot waits for the next checkpoint (concurrent
		// mode): replaced, a held replica would stay stopped.
		d.hist.add("  fault: no snapshot: another waits for its regress")
		return nil
	}
	d.m.mu.Lock()
	for k, s := range d.m.Sessions {
		if snap.whole() && s.Behind {
			d.m.mu.Unlock()
			d.hist.add("  fault: no snapshot: %v may be behind the database already", k)
			return nil
		}
		snap.lens[k] = len(s.Events)
	}
	d.m.mu.Unlock()
	switch mode {
	case "rdb":
		if err := faultRetry(ctx, func() error { return d.e.rdb.Save(ctx).Err() }); err != nil {
			return fmt.Errorf("SAVE: %w", err)
		}
	case "hold":
		k := d.clients[0].slots[slot].key
		master, err := d.e.masterOf(d.e.keys.Session(k.App, k.User, k.SID).Session)
		if err != nil {
			return err
		}
		if snap.replica, err = d.e.holdReplica(master); err != nil {
			return fmt.Errorf("hold a replica of %s: %w", master, err)
		}
		snap.master = master
		snap.shard = map[sessKey]bool{}
		for k := range snap.lens {
			m, err := d.e.masterOf(d.e.keys.Session(k.App, k.User, k.SID).Session)
			if err != nil {
				return err
			}
			snap.shard[k] = m == master
		}
		d.hist.add("  fault: replica %s of master %s (the shard of %v) stopped (SIGKILL): its AOF holds what it had applied", snap.replica, master, k)
	case "dump":
		k := d.clients[0].slots[slot].key
		s := d.m.session(k)
		if s == nil || s.Behind {
			d.hist.add("  fault: no snapshot of %v (not live, or behind the database already)", k)
			return nil
		}
		snap.key, snap.lens = k, map[sessKey]int{k: len(s.Events)}
		sk := d.e.keys.Session(k.App, k.User, k.SID)
		// The temp hash with the session hash that names its invocation
		// (m:tinv): the copy is one moment's, as a replica's or an RDB's.
		snap.keys = []string{sk.Session, sk.Events, sk.EventIDs, sk.Undo, sk.Temp}
		if d.sh.Clients == 1 {
			snap.keys = append(snap.keys, sk.User)
		}
		snap.dumps = map[string]string{}
		for _, key := range snap.keys {
			var v string
			err := faultRetry(ctx, func() (err error) {
				v, err = d.e.rdb.Dump(ctx, key).Result()
				if err == redis.Nil {
					v, err = "", nil
				}
				return err
			})
			if err != nil {
				return fmt.Errorf("DUMP %q: %w", key, err)
			}
			if v != "" {
				snap.dumps[key] = v
			}
		}
	}
	for k := range snap.lens {
		snap.temps[k] = d.m.tempOf(k)
	}
	d.snapMu.Lock()
	d.snap = snap
	d.snapMu.Unlock()
	d.hist.add("  fault: snapshot (%s) taken: %d sessions", mode, len(snap.lens))
	d.count("snapshot-" + mode)
	return nil
}

// regress puts Redis back to the snapshot and tells the model what it may
// have lost: what was acknowledged after the snapshot and not flushed since.
func (d *driver) regress(ctx context.Context, checkpoint bool) error {
	d.snapMu.Lock()
	snap := d.snap
	d.snapMu.Unlock()
	if snap == nil {
		d.hist.add("  fault: no snapshot to go back to")
		return nil
	}
	if snap.whole() && d.sh.Clients > 1 && !checkpoint {
		d.hist.add("  fault: no regress: the checkpoint's snapshot waits for the next checkpoint")
		return nil
	}
	defer func() {
		d.snapMu.Lock()
		d.snap = nil
		d.snapMu.Unlock()
	}()
	// No batch in flight: what the database holds is known when Redis is back.
	d.e.mu.Lock()
	running := len(d.e.flushers)
	d.e.mu.Unlock()
	d.e.stopFlushers(ctx)
	defer d.e.startFlushers(running)
	var keys []sessKey
	users := map[userKey]bool{}
	for k := range snap.lens {
		if d.m.session(k) != nil {
			keys = append(keys, k)
			users[userKey{k.App, k.User}] = true
			// Before the regress, as for an eviction. A hold takes one
			// shard back: the temp state of a session another shard serves
			// stays as it is.
			if snap.mode != "hold" || snap.shard[k] {
				d.m.tempRegressed(k, snap.temps[k])
			}
		}
	}
	slices.SortFunc(keys, func(a, b sessKey) int { return cmpStr(a.String(), b.String()) })
	d.count("regress-" + snap.mode)
	switch snap.mode {
	case "rdb":
		d.m.looseScopes(nil, true, true)
		d.faultBegin()
		err := d.e.restartFromRDB()
		d.hist.add("  fault: redis killed (SIGKILL) and restarted from the RDB snapshot: %v", err)
		d.faultEnd()
		if err != nil {
			return err
		}
	case "hold":
		// The shard's user and app hashes go back too; which users and apps
		// the shard holds is not followed: all are loose.
		d.m.looseScopes(nil, true, true)
		d.faultBegin()
		err := d.e.takeOverHeld(snap.master, snap.replica)
		d.hist.add("  fault: master %s killed, its held replica %s started from its AOF and taken over (CLUSTER FAILOVER TAKEOVER), the old master back as its replica: %v",
			snap.master, snap.replica, err)
		d.faultEnd()
		if err != nil {
			return err
		}
	case "dump":
		if d.sh.Clients == 1 {
			d.m.looseScopes(users, false, false)
		}
		err := faultRetry(ctx, func() error {
			_, err := d.e.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
				for _, key := range snap.keys {
					p.Del(ctx, key)
					if v, ok := snap.dumps[key]; ok {
						p.RestoreReplace(ctx, key, 0, v)
					}
				}
				return nil
			})
			return err
		})
		d.hist.add("  fault: the keys of %v put back as they were (RESTORE REPLACE): %v", snap.key, err)
		if err != nil {
			return err
		}
	}
	for _, k := range keys {
		where := ""
		if snap.mode == "hold" {
			where = fmt.Sprintf(" (its shard taken back: %v)", snap.shard[k])
		}
		if err := d.resolve(ctx, k, snap.lens[k], where); err != nil {
			return err
		}
	}
	return nil
}

func cmpStr(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// restartFromRDB kills the standalone Redis and starts it from the last
// SAVE: the dump becomes the base of a new AOF (Redis 7 with appendonly
// loads the AOF, and an AOF whose base is an RDB file loads that file).
func (e *env) restartFromRDB() error {
	e.redis.Kill(e.t)
	dir := filepath.Join(e.redis.Dir, "appendonlydir")
	if err := os.RemoveAll(dir); err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	rdb, err := os.ReadFile(filepath.Join(e.redis.Dir, "dump.rdb"))
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "appendonly.aof.1.base.rdb"), rdb, 0o644); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "appendonly.aof.manifest"), []byte("file appendonly.aof.1.base.rdb seq 1 type b\n"), 0o644); err != nil {
		return err
	}
	e.redis.Start(e.t)
	return e.waitRedis(time.Minute)
}

// resolve reads what the database and Redis hold of session k after a
// regress (taken had events when the snapshot was taken) and has the model
// judge it (Model.regressed: what neither holds is lost, which is allowed
// only of events acknowledged after the snapshot and not flushed by a
// complete flush since; a copy that is not the database's view is behind).
// where is said in the history after the session.
func (d *driver) resolve(ctx context.Context, k sessKey, taken int, where string) error {
	s := d.m.session(k)
	var dbIDs []string
	err := faultRetry(ctx, func() error {
		dbIDs = nil
		return queryRows(ctx, d.e.db, fmt.Sprintf(`SELECT id FROM events WHERE app_name = '%s' AND user_id = '%s' AND session_id = '%s' ORDER BY "timestamp"`,
			sqlQuote(k.App), sqlQuote(k.User), sqlQuote(k.SID)), func(r *sql.Rows) error {
			var id string
			err := r.Scan(&id)
			dbIDs = append(dbIDs, id)
			return err
		})
	})
	if err != nil {
		return fmt.Errorf("regress: read the events of %v: %w", k, err)
	}
	// Rows of an earlier incarnation (its delete, and the create after it,
	// still in the change log) are none of this one's events.
	var inc int64
	var deleted bool
	err = faultRetry(ctx, func() error {
		err := d.e.db.QueryRowContext(ctx, `SELECT incarnation, deleted FROM adksession_sessions WHERE app_name = $1 AND user_id = $2 AND session_id = $3`,
			k.App, k.User, k.SID).Scan(&inc, &deleted)
		if errors.Is(err, sql.ErrNoRows) {
			inc, err = 0, nil
		}
		return err
	})
	if err != nil {
		return fmt.Errorf("regress: read the bookkeeping of %v: %w", k, err)
	}
	if inc != s.Inc || deleted {
		dbIDs = nil
	}
	sk := d.e.keys.Session(k.App, k.User, k.SID)
	var meta []any
	if err := faultRetry(ctx, func() (err error) {
		meta, err = d.e.rdb.HMGet(ctx, sk.Session, "m:inc", "m:rev").Result()
		return err
	}); err != nil {
		return fmt.Errorf("regress: read the session hash of %v: %w", k, err)
	}
	rN := -1
	if inc, _ := meta[0].(string); inc == strconv.FormatInt(s.Inc, 10) {
		rev, _ := meta[1].(string)
		rN, _ = strconv.Atoi(rev)
	}
	// The copy of a session behind the database may be the copy's view or,
	// let go of and read back since, the database's: the id at its last seq
	// tells them apart (a behind copy's events are not trimmed).
	last := ""
	if rN > 0 && s.Behind {
		if err := faultRetry(ctx, func() error {
			got, err := d.e.rdb.ZRangeArgs(ctx, redis.ZRangeArgs{Key: sk.EventIDs, ByScore: true,
				Start: strconv.Itoa(rN), Stop: strconv.Itoa(rN)}).Result()
			if len(got) > 0 {
				last = got[0]
			}
			return err
		}); err != nil {
			return fmt.Errorf("regress: read the ids of %v: %w", k, err)
		}
	}
	lost, behind, err := d.m.regressed(k, dbIDs, rN, last, taken)
	if err != nil {
		d.dump(k)
		return err
	}
	d.hist.add("  regress %v%s: the database holds %d events, Redis %d (behind: %v); lost (acknowledged after the snapshot, not flushed) %q",
		k, where, len(dbIDs), rN, behind, lost)
	d.forgetHandles(k)
	return nil
}

// regressed records what a regress left of session k: the database holds
// the events dbIDs (in timestamp order), Redis a copy of k's incarnation
// with rN events (-1: none), the last one last ("": not known); taken events
// were acknowledged when the snapshot was taken. Each side holds a prefix of
// what it was acknowledged: the database of the session's events; Redis of
// the events its copy held, which, when the session was behind already (ADK
// appended to the database during the snapshot), are the copy's view, or
// the database's once the copy was let go of and read back (the view whose
// event rN is last; the copy's first). What neither holds is lost, which is
// allowed only of events acknowledged after the snapshot and not flushed by a
// complete flush since. The session is behind when the copy is not what the
// database will hold once flushed (the database's events, then the copy's
// that it lacks). Before, Redis's copy was taken for a prefix of the
// session's events even when behind (cluster single seed 767950407224: the
// copy, of a shard the hold did not take back, held 6 events and one
// appended after ADK's row, 7 in all, the database 6 and ADK's: the model
// took the copy for the database's 7, not behind, and its own event for
// lost).
func (m *Model) regressed(k sessKey, dbIDs []string, rN int, last string, taken int) (lost []string, behind bool, err error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	s := m.Sessions[k]
	// The database orders by timestamp, Redis by seq, and both agree; the
	// model holds a shared session's events in the order they were
	// acknowledged, which concurrent appends need not keep.
	slices.SortStableFunc(s.Events, func(a, b *mEvent) int { return cmp.Compare(a.Ts, b.Ts) })
	n := len(s.Events)
	if len(dbIDs) > n || !slices.Equal(dbIDs, ids(s.Events[:len(dbIDs)])) {
		return nil, false, fmt.Errorf("regress: the database holds events %q of %v, acknowledged %q", dbIDs, k, ids(s.Events))
	}
	views := [][]*mEvent{s.Events}
	if s.Behind {
		views = [][]*mEvent{s.View, s.Events}
	}
	var copied []*mEvent
	found := false
	for _, v := range views {
		if rN <= len(v) && (rN <= 0 || last == "" || v[rN-1].ID == last) {
			copied, found = v[:max(rN, 0)], true
			break
		}
	}
	if !found {
		return nil, false, fmt.Errorf("regress: Redis holds %d events of %v, the last %q; acknowledged %q (the copy's view %q)",
			rN, k, last, ids(s.Events), ids(s.View))
	}
	inCopy := map[string]bool{}
	for _, e := range copied {
		inCopy[e.ID] = true
	}
	var kept, gone []*mEvent
	for i, e := range s.Events {
		if i < len(dbIDs) || inCopy[e.ID] {
			kept = append(kept, e)
			continue
		}
		if i < taken || i < min(s.FlushedN, n) {
			return nil, false, fmt.Errorf("regress: %v lost %s (the database holds %d events, Redis %d): %d were acknowledged before the snapshot, %d flushed before the regress; kept %q",
				k, e.ID, len(dbIDs), rN, taken, s.FlushedN, ids(kept))
		}
		lost = append(lost, e.ID)
		gone = append(gone, e)
	}
	s.Events = kept
	m.lostState(k, s, gone)
	s.FlushedN = min(s.FlushedN, len(kept))
	// The same events at the same times: the copy is the database's view (an
	// event Redis's older copy stored again is at another time).
	same := slices.EqualFunc(copied, kept, func(a, b *mEvent) bool { return a.ID == b.ID && a.Ts == b.Ts })
	s.Behind, s.View, s.CopyLost = rN >= 0 && !same, nil, copyKept
	if s.Behind {
		s.View = slices.Clone(copied)
	}
	return lost, s.Behind, nil
}

// lostState: a regress lost the events gone of k (acknowledged after the
// snapshot, not flushed). A batch writes a session's row with the state
// Redis held when it read the batch, which may hold the deltas of events
// after its last one (docs/design.md, "Redis faults": known): the row, and
// a read of the session put back from it, may still hold a lost event's
// session keys and its update time, until a later event writes them
// (standalone single seed 218679370279, checkpoint 0: the row held #31's
// key and time, #31 lost with the RDB restart). Called with m.mu held.
func (m *Model) lostState(k sessKey, s *mSession, gone []*mEvent) {
	cur := s.state()
	for _, e := range gone {
		for key, v := range e.Delta {
			if scopeOf(key) != scopeSession {
				continue
			}
			w := writtenKey(k, key)
			if len(m.Loose[w]) == 0 {
				if c, ok := cur[key]; ok {
					m.Loose[w] = []any{c}
				} else {
					m.Loose[w] = []any{absent{}}
				}
			}
			m.Loose[w] = append(m.Loose[w], v)
		}
		if e.Ts > s.updateTime() {
			s.LostUT = append(s.LostUT, e.Ts)
		} else {
			s.IndexLow = true
		}
	}
}

// forgetHandles drops every client's handles on k (test goroutine, the
// clients waiting): a handle read before a regress is not followed by the
// model.
func (d *driver) forgetHandles(k sessKey) {
	for _, c := range d.clients {
		for _, sl := range append(append([]*slot(nil), c.slots...), c.shared...) {
			if sl.key == k {
				sl.handles = nil
			}
		}
	}
}

// converge ends, at a checkpoint, the sessions Redis may hold behind the
// database: once flushed their keys carry a TTL and are evicted (as
// volatile-lru may), so the next read puts back what the database holds.
func (d *driver) converge(ctx context.Context) error {
	var behind []sessKey
	d.m.mu.Lock()
	for k, s := range d.m.Sessions {
		if s.Behind {
			behind = append(behind, k)
		}
	}
	d.m.mu.Unlock()
	for _, k := range behind {
		if err := d.convergeSession(ctx, k); err != nil {
			return err
		}
	}
	return nil
}

// convergeSession evicts the keys of k, which Redis may hold behind the
// database, if they carry a TTL; once they are gone k reads exactly again.
func (d *driver) convergeSession(ctx context.Context, k sessKey) error {
	sk := d.e.keys.Session(k.App, k.User, k.SID)
	for _, key := range []string{sk.Session, sk.Events, sk.EventIDs, sk.Undo, sk.Temp} {
		if _, err := d.e.evict(ctx, key); err != nil {
			return err
		}
	}
	var n int64
	if err := faultRetry(ctx, func() (err error) { n, err = d.e.rdb.Exists(ctx, sk.Session).Result(); return err }); err != nil {
		return err
	}
	if n == 0 {
		d.m.tempLostOf(k)
		d.m.mu.Lock()
		s := d.m.Sessions[k]
		s.Behind, s.View, s.CopyLost = false, nil, copyKept
		d.m.mu.Unlock()
		d.forgetHandles(k)
	}
	d.hist.add("  converge %v: its keys evicted: %v", k, n == 0)
	return nil
}

// ---------------------------------------------------------------------------
// The ADK writer.

// flushedSlot is the session of slot o.Slot once a complete flush has
// written it; false (said in the history) when it is not live, has an
// unsettled operation, or the flush failed.
func (c *client) flushedSlot(o *op) (sessKey, bool) {
	sl := c.opSlot(c.slots[o.Slot])
	if sl == nil {
		return sessKey{}, false
	}
	if c.d.m.session(sl.key) == nil {
		c.log("skipped: no session")
		return sessKey{}, false
	}
	return sl.key, c.flush(o)
}

// adkAppend appends an event to one of the client's sessions the way ADK
// Python's DatabaseSessionService.append_event does, straight into the
// database (once a flush has written the session): an events row with
// event_data as Event.model_dump (timestamp in float seconds), the session's
// state delta merged into sessions.state, the user's into user_states, and
// update_time set to the event's time. Its timestamp is ADK's clock, after
// the session's last event.
func (c *client) adkAppend(o *op) {
	d := c.d
	k, ok := c.flushedSlot(o)
	if !ok {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if d.m.session(k).Behind {
		// Redis may have let go of the older copy since (a rebasing flush
		// deletes it, and a read puts back the database's), and the model
		// holds one older copy only: the copy goes first, if it can
		// (cluster single seed 684012642560: a second ADK append after the
		// first one's copy was replaced by the database's).
		if err := d.convergeSession(ctx, k); err != nil {
			c.faultErr(o, err)
			return
		}
	}
	s := d.m.session(k)
	ts := max(time.Now().UnixMicro(), s.lastTs()+1, s.Inc+1)
	id := fmt.Sprintf("adk-c%d-%d", c.id, o.Step)
	skey, ukey := fmt.Sprintf("adk.c%d", c.id), fmt.Sprintf("c%d.adk", c.id)
	val := o.Step
	data := fmt.Sprintf(`{"invocation_id":"adk-inv","author":"agent","actions":{"state_delta":{%q:%d,%q:%d},`+
		`"artifact_delta":{},"requested_auth_configs":{},"requested_tool_confirmations":{}},"id":%q,"timestamp":%.6f}`,
		skey, val, "user:"+ukey, val, id, float64(ts)/1e6)
	at := time.UnixMicro(ts).UTC().Format("2006-01-02 15:04:05.000000")
	tx, err := d.e.db.BeginTx(ctx, nil)
	if err != nil {
		c.faultErr(o, err)
		return
	}
	defer tx.Rollback()
	var n int64
	for _, q := range []struct {
		sql  string
		args []any
	}{
		{`INSERT INTO events (id, app_name, user_id, session_id, invocation_id, "timestamp", event_data) VALUES ($1, $2, $3, $4, 'adk-inv', $5, $6)`,
			[]any{id, k.App, k.User, k.SID, at, data}},
		{`UPDATE sessions SET state = state || jsonb_build_object($4::text, $5::int), update_time = $6 WHERE app_name = $1 AND user_id = $2 AND id = $3`,
			[]any{k.App, k.User, k.SID, skey, val, at}},
		{`UPDATE user_states SET state = state || jsonb_build_object($3::text, $4::int), update_time = $5 WHERE app_name = $1 AND user_id = $2`,
			[]any{k.App, k.User, ukey, val, at}},
	} {
		r, err := tx.ExecContext(ctx, q.sql, q.args...)
		if err == nil {
			n, err = r.RowsAffected()
		}
		if err != nil || n != 1 {
			if !c.faultErr(o, err) {
				c.failf(o, "ADK append: %s: %d rows (%v)", q.sql, n, err)
			}
			return
		}
	}
	if err := tx.Commit(); err != nil {
		c.faultErr(o, err)
		return
	}
	e := &mEvent{ID: id, Inv: "adk-inv", Author: "agent", Ts: ts, Client: c.id, ADK: true,
		Delta: map[string]any{skey: float64(val), "user:" + ukey: float64(val)}}
	d.m.adkAppended(k, e, map[string]any{ukey: float64(val)})
	c.log("ADK appended %s at %d", id, ts)
}

// releaseHold starts the replica a hold snapshot stopped, when the run ends
// before its regress: the servers serve the next seed.
func (d *driver) releaseHold() {
	master, replica := d.held()
	if replica == "" {
		return
	}
	d.snapMu.Lock()
	d.snap = nil
	d.snapMu.Unlock()
	err := d.e.releaseHeld(master, replica)
	d.hist.add("  the held replica %s started again, caught up with %s: %v", replica, master, err)
	if err != nil {
		d.failf("release the held replica: %v", err)
	}
}

func (d *driver) heldReplica() bool {
	_, replica := d.held()
	return replica != ""
}
