package sim

// FLUSHALL, or a session's keys evicted, while a flusher's batch is in flight
// (docs/simulation.md, "Faults"; docs/design.md, "Redis behind the
// database"): the batch read Redis before the loss and commits after it; a
// cold read meanwhile puts back the database's older rows, so Redis ends up
// behind the database. The batch holds every write acknowledged: nothing may
// be lost.

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/adksession/adksession/service"
)

// inFlight (client 0, single mode): a complete flush, then one new event of
// the slot's session, which the batch the fault holds will carry alone.
func (c *client) inFlight(o *op) {
	d := c.d
	k, ok := c.flushedSlot(o)
	if !ok {
		return
	}
	a := *o
	a.Kind = opAppend
	c.appendOp(&a)
	if s := d.m.session(k); s == nil || s.FlushedN >= len(s.Events) || c.pendingOn(k) {
		c.log("skipped: no new event to hold in flight")
		return
	}
	req := &faultReq{op: o, done: make(chan error, 1)}
	d.faults <- req
	if err := <-req.done; err != nil {
		c.failf(o, "%v", err)
	}
}

// inFlight holds a batch with the unflushed event of client 0's session
// o.Slot on a row lock (test goroutine): a transaction takes the session's
// sessions row FOR UPDATE, a flusher's pass starts and its batch waits on
// the lock (pg_stat_activity says so). Then FLUSHALL (or the session's keys,
// and with evict-user its user's hash, are deleted, as an allkeys policy
// may), a cold Get of the session (o.coldGet) reads the database's older
// rows and puts them back, and the lock goes: the batch commits. Everything
// acknowledged must be in the database (resolve with nothing allowed lost);
// Redis may hold the session behind it.
func (d *driver) inFlight(ctx context.Context, o *op) error {
	d.pgStart()
	k := d.clients[0].slots[o.Slot].key
	var tx *sql.Tx
	var pid int
	// Tried again: the pool may hold connections of a Postgres stopped since.
	err := faultRetry(ctx, func() (err error) {
		tx, pid, err = d.lockRow(ctx, k)
		return err
	})
	if err != nil {
		return fmt.Errorf("lock the sessions row of %v: %w", k, err)
	}
	if tx == nil {
		d.hist.add("  fault: in flight: %v has no sessions row to lock", k)
		return nil
	}
	defer tx.Rollback()
	f := d.e.svcs[0].NewFlusher(d.e.cfg.Logger)
	pass := make(chan error, 1)
	go func() {
		_, err := f.RunOnce(ctx)
		pass <- err
	}()
	defer func() {
		tx.Rollback() // first: the flusher's drain would wait on the lock
		f.Stop(ctx)
	}()
	waiter, err := d.waitLocked(ctx, pid, pass)
	if err != nil {
		return err
	}
	d.hist.add("  fault: in flight: a batch waits on the lock of the sessions row of %v (backend %d, blocked by %d)", k, waiter, pid)
	s := d.m.session(k)
	uk := userKey{k.App, k.User}
	sk := d.e.keys.Session(k.App, k.User, k.SID)
	userGone := o.Mode != "evict"
	switch o.Mode {
	case "flushall":
		d.m.allTempLost() // before the loss, as for an eviction
		if err := faultRetry(ctx, func() error { return d.e.flushAll(ctx) }); err != nil {
			return err
		}
		d.hist.add("  fault: FLUSHALL while the batch waits")
	default:
		d.m.tempLostOf(k)
		keys := []string{sk.Session, sk.Events, sk.EventIDs, sk.Undo, sk.Temp}
		if userGone {
			keys = append(keys, sk.User)
		}
		for _, key := range keys {
			if err := faultRetry(ctx, func() error { return d.e.rdb.Del(ctx, key).Err() }); err != nil {
				return err
			}
		}
		d.hist.add("  fault: the keys of %v deleted while the batch waits: %q", k, keys)
	}
	if o.coldGet() {
		// The read puts back what the database holds: the session without the
		// event in flight, the user's (and after FLUSHALL the app's) state
		// without its delta.
		d.m.copyBehind(k, s.FlushedN)
		if userGone {
			d.m.looseScopes(map[userKey]bool{uk: true}, false, o.Mode == "flushall")
		}
		if err := d.coldGet(ctx, o, k); err != nil {
			return err
		}
	}
	if err := tx.Rollback(); err != nil {
		return err
	}
	select {
	case err = <-pass:
	case <-ctx.Done():
		err = ctx.Err()
	}
	if err != nil {
		return fmt.Errorf("the pass whose batch waited: %w", err)
	}
	if err := f.Stop(ctx); err != nil {
		return fmt.Errorf("stop the flusher: %w", err)
	}
	d.m.flushed() // the batch held every write acknowledged
	d.hist.add("  fault: the lock released, the batch committed")
	d.count("in-flight-" + o.Mode)
	if o.coldGet() {
		d.count("in-flight-cold-get")
	}
	keys := []sessKey{k}
	if o.Mode == "flushall" {
		keys = d.m.liveKeys()
	}
	for _, k := range keys {
		if err := d.resolve(ctx, k, len(d.m.session(k).Events), ""); err != nil {
			return err
		}
	}
	return nil
}

// lockRow takes the sessions row of k FOR UPDATE in a transaction and
// returns it with its backend's pid (a nil transaction: no such row).
func (d *driver) lockRow(ctx context.Context, k sessKey) (*sql.Tx, int, error) {
	tx, err := d.e.db.BeginTx(ctx, nil)
	if err != nil {
		return nil, 0, err
	}
	var pid, one int
	err = tx.QueryRowContext(ctx, `SELECT pg_backend_pid()`).Scan(&pid)
	if err == nil {
		err = tx.QueryRowContext(ctx, `SELECT 1 FROM sessions WHERE app_name = $1 AND user_id = $2 AND id = $3 FOR UPDATE`, k.App, k.User, k.SID).Scan(&one)
	}
	if err != nil {
		tx.Rollback()
		if errors.Is(err, sql.ErrNoRows) {
			return nil, 0, nil
		}
		return nil, 0, err
	}
	return tx, pid, nil
}

// waitLocked polls pg_stat_activity until a backend waits on a lock held by
// backend pid, and returns it; an error when the pass ended first or after 30 s.
func (d *driver) waitLocked(ctx context.Context, pid int, pass <-chan error) (int, error) {
	deadline := time.Now().Add(30 * time.Second)
	for {
		var waiter int
		err := d.e.db.QueryRowContext(ctx, `SELECT pid FROM pg_stat_activity
WHERE datname = current_database() AND wait_event_type = 'Lock' AND $1 = ANY(pg_blocking_pids(pid)) LIMIT 1`, pid).Scan(&waiter)
		switch {
		case err == nil:
			return waiter, nil
		case !errors.Is(err, sql.ErrNoRows):
			return 0, fmt.Errorf("pg_stat_activity: %w", err)
		}
		select {
		case err := <-pass:
			return 0, fmt.Errorf("the flusher's pass ended without waiting on the lock: %v", err)
		default:
		}
		if time.Now().After(deadline) {
			return 0, errors.New("no batch waited on the lock within 30 s")
		}
		time.Sleep(10 * time.Millisecond) // poll pace
	}
}

// coldGet reads session k in full while the batch waits and checks it
// against the model (either view: the database's older rows are put back).
func (d *driver) coldGet(ctx context.Context, o *op, k sessKey) error {
	resp, err := d.e.svcs[o.Svc].Get(ctx, &service.GetRequest{AppName: k.App, UserID: k.User, SessionID: k.SID})
	if err != nil {
		return fmt.Errorf("cold get of %v while the batch waits: %w", k, err)
	}
	s := d.m.session(k)
	if diffs, _ := d.m.readDiff(k, s, resp.Session, 0, -1, -1, true, ""); len(diffs) > 0 {
		d.dump(k)
		return fmt.Errorf("cold get of %v while the batch waits: %v", k, diffs)
	}
	d.hist.add("  fault: cold get of %v while the batch waits: %d events (the database holds %d, %d acknowledged)",
		k, resp.Session.Events().Len(), s.FlushedN, len(s.Events))
	return nil
}

// copyBehind: Redis's copy of k holds only its first n events (it was put
// back from the database's older rows).
func (m *Model) copyBehind(k sessKey, n int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	s := m.Sessions[k]
	s.Behind, s.View, s.CopyLost = true, slices.Clone(s.Events[:n]), copyKept
	s.TempSure = map[string]bool{}
}

// copyGone: Redis lost a key of k that the session is read back for
// (keyOwner.copy): an older copy of k it held goes at the next call that
// finds the loss (readBack; appendOnly: the event ids, which only an append
// counts), which puts back the database's events and numbering; until then
// reads and lists may still answer the copy (standalone single seed
// 331527015200, #75: the events and session hash of a copy evicted; a
// handle read back from the database at #78 was held at the copy's
// numbering, taken as stale at #99; seed 1046909943327, #323 and #327: the
// event ids of a copy evicted, and a list and a read still answered the
// copy's).
func (m *Model) copyGone(k sessKey, appendOnly bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	s := m.Sessions[k]
	switch {
	case s == nil || !s.Behind || s.CopyLost == copyLostReads:
	case appendOnly:
		s.CopyLost = copyLostAppends
	default:
		s.CopyLost = copyLostReads
	}
}

// readBack: a read (append: an append) of k through the service answered;
// if Redis had lost a key of its older copy that the call finds
// (copyGone), the call put back the database's session, and the copy is
// gone. It reports whether it was.
func (m *Model) readBack(k sessKey, append bool) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	s := m.Sessions[k]
	if s == nil || s.CopyLost == copyKept || (s.CopyLost == copyLostAppends && !append) {
		return false
	}
	s.Behind, s.View, s.CopyLost = false, nil, copyKept
	return true
}

// allCopiesGone: Redis lost everything (FLUSHALL): no older copy of a
// session is left, and every read puts back what the database holds.
func (m *Model) allCopiesGone() {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, s := range m.Sessions {
		s.Behind, s.View, s.CopyLost = false, nil, copyKept
	}
}

// liveKeys lists the live sessions, sorted.
func (m *Model) liveKeys() []sessKey {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []sessKey
	for k := range m.Sessions {
		out = append(out, k)
	}
	slices.SortFunc(out, func(a, b sessKey) int { return cmpStr(a.String(), b.String()) })
	return out
}
