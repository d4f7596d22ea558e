package sim

// The driver: clients (goroutines, each with its own sessions and handles)
// run their operations in rounds; between rounds every client stops, settles
// what it was not acknowledged, and the main goroutine checks everything
// against the model (checkpoint). Faults are operations of client 0, carried
// out by the main goroutine (which owns the servers).

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/adksession/adksession/service"
)

const (
	opTimeout     = 8 * time.Second
	settleTimeout = 3 * time.Minute
	faultGrace    = 5 * time.Second // errors this soon after a fault ended are the fault's
)

type driver struct {
	t    *testing.T
	sh   shape
	seed int64
	e    *env
	m    *Model
	hist *history

	faults chan *faultReq
	stopCh chan struct{}
	failMu sync.Mutex
	failed string

	activeFaults atomic.Int32
	faultEnded   atomic.Int64 // unix ns
	pgDown       bool         // test goroutine only

	poolMu  sync.Mutex
	pastIDs []string         // event ids of other sessions and of earlier incarnations
	ever    map[sessKey]bool // every session ever created (lists may race creates and deletes)
	shared  map[sessKey]bool

	snapMu sync.Mutex
	snap   *snapshot // taken by a snapshot fault, until its regress

	clients []*client
	ops     atomic.Int64
	// knownDup: retried events stored again by an older Redis copy (open finding)
	knownDup atomic.Int64
	// dbDup: such retries that the copy had looked up in the database instead
	dbDup atomic.Int64
	// conflicts are the events stored again under an id the database holds
	// for another event (storedOverDB of an idReuse): the flush
	// dead-letters them, and a checkpoint takes only these (and drops them).
	conflictMu sync.Mutex
	conflicts  map[sessKey]map[string]bool
	// holds, when set, answers copyHolds instead of Redis (the model's
	// tests): whether Redis holds the event, and at which seq.
	holds func(k sessKey, id string) (bool, int64)
	// revs, when set, answers redisRev instead of Redis (the model's
	// tests); without it, in the model's tests, Redis's revision is not
	// known.
	revs   func(k sessKey) (int64, bool)
	counts [len(opNames)]atomic.Int64
	// views: the compacted views read (Get{Compacted: true}) and, of those,
	// compared with CompactedView of a whole read at the same revision.
	views, viewsCompared atomic.Int64
	kindMu               sync.Mutex
	kinds                map[string]int // faults carried out, by kind and mode (each seed's summary)
}

// count records a fault carried out (a kind and its mode).
func (d *driver) count(kind string) {
	d.kindMu.Lock()
	defer d.kindMu.Unlock()
	if d.kinds == nil {
		d.kinds = map[string]int{}
	}
	d.kinds[kind]++
}

// failf records the run's first failure and stops every client.
func (d *driver) failf(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	d.hist.add("FAILURE: %s", msg)
	d.failMu.Lock()
	defer d.failMu.Unlock()
	if d.failed == "" {
		d.failed = msg
		close(d.stopCh)
	}
}

func (d *driver) stopped() bool {
	select {
	case <-d.stopCh:
		return true
	default:
		return false
	}
}

// faultQuiet tells whether no fault runs and none ended recently: an error
// then is the system's, not the fault's.
func (d *driver) faultQuiet() bool {
	return d.activeFaults.Load() == 0 && time.Since(time.Unix(0, d.faultEnded.Load())) > faultGrace
}

func (d *driver) faultBegin() { d.activeFaults.Add(1) }
func (d *driver) faultEnd() {
	d.faultEnded.Store(time.Now().UnixNano())
	d.activeFaults.Add(-1)
}

func (d *driver) remember(k sessKey, events []*mEvent) {
	d.poolMu.Lock()
	defer d.poolMu.Unlock()
	for _, e := range events {
		if len(d.pastIDs) < 500 {
			d.pastIDs = append(d.pastIDs, e.ID)
		} else {
			d.pastIDs[len(e.ID)*31%500] = e.ID
		}
	}
}

func (d *driver) pastID(pick int) string {
	d.poolMu.Lock()
	defer d.poolMu.Unlock()
	if len(d.pastIDs) == 0 {
		return ""
	}
	return d.pastIDs[pick%len(d.pastIDs)]
}

func (d *driver) markCreated(k sessKey) {
	d.poolMu.Lock()
	defer d.poolMu.Unlock()
	d.ever[k] = true
}

func (d *driver) everCreated(k sessKey) bool {
	d.poolMu.Lock()
	defer d.poolMu.Unlock()
	return d.ever[k]
}

// ---------------------------------------------------------------------------
// Clients.

type handle struct {
	s   *service.Session
	inc int64 // incarnation it was read from
	rev int64 // the session's revision it reflects
	// ofCopy: its revision and last event may be those of Redis's older
	// copy of the session (read from it, appended to it, answered by it).
	// The service refuses as stale a handle at the stored revision whose
	// last event is at another time than the stored one's (another history
	// at that revision): the model allows that answer while it holds two
	// views and, for such a handle, after (alternatives). Its session state
	// may be the copy's (the same time at the same revision is not told
	// apart): not checked.
	ofCopy bool
	// conflicted: it stored on Redis's older copy an event the flush
	// dead-letters (a conflict). Once the copy is rebased, its revision and
	// last event can be the stored ones while its state holds that event's
	// delta and lacks the database's event under the id (docs/design.md,
	// "Acknowledged writes the database cannot take"): its state is not
	// checked after an append. So is one read from the copy while it holds
	// such an event (seed 923431865797, #338). A read gives a new handle.
	conflicted bool
}

type slot struct {
	key     sessKey
	handles []*handle
	shared  bool
}

func (sl *slot) addHandle(h *handle) {
	sl.handles = append(sl.handles, h)
	if len(sl.handles) > 4 {
		sl.handles = sl.handles[1:]
	}
}

type client struct {
	d       *driver
	id      int
	gen     *gen
	slots   []*slot
	shared  []*slot
	pending []*pending
	all     bool // the checkpoint's reader: every key and session reads exactly
	cur     int  // step of the operation running (for the history)
}

// flush drains the write-behind for operation o and tells a single
// client's model; false (the fault recorded) when it failed.
func (c *client) flush(o *op) bool {
	d := c.d
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := d.e.flush(ctx); err != nil {
		c.faultErr(o, err)
		return false
	}
	if d.sh.Clients == 1 {
		d.m.flushed()
	}
	return true
}

func (c *client) log(format string, args ...any) {
	c.d.hist.add("  c%d #%d -> "+format, append([]any{c.id, c.cur}, args...)...)
}

func (c *client) failf(o *op, format string, args ...any) {
	c.d.failf("%s: %s", o, fmt.Sprintf(format, args...))
}

// isFault tells whether err is not one of the contract's answers (a network
// error, a timeout, a server down): the operation may or may not have been applied.
func isFault(err error) bool {
	return err != nil && !errors.Is(err, service.ErrNotFound) && !errors.Is(err, service.ErrAlreadyExists) &&
		!errors.Is(err, service.ErrStaleSession) && !errors.Is(err, service.ErrInvalidArgument)
}

// faultErr handles an error that is no answer of the contract: allowed
// while a fault runs (the caller then settles the operation), a failure otherwise.
func (c *client) faultErr(o *op, err error) bool {
	if !isFault(err) {
		return false
	}
	c.log("fault error: %v", err)
	if c.d.faultQuiet() {
		c.failf(o, "error while no fault runs: %v", err)
	}
	return true
}

func opCtx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), opTimeout)
}

// opSlot returns sl, or nil (and says so) when an operation on its session
// is not settled yet: the session's state is not known until it is.
func (c *client) opSlot(sl *slot) *slot {
	if c.pendingOn(sl.key) {
		c.log("skipped: unsettled operation on the session")
		return nil
	}
	return sl
}

func (c *client) pendingOn(k sessKey) bool {
	for _, p := range c.pending {
		if p.key == k {
			return true
		}
	}
	return false
}

// run executes rounds of ops, meeting the others at a barrier after each.
func (c *client) run(rounds <-chan int, arrive chan<- int, steps int) {
	for range rounds {
		for i := 0; i < steps && !c.d.stopped(); i++ {
			c.settleAll(false)
			o := c.gen.next()
			c.exec(o)
		}
		c.heal()
		c.settleAll(true)
		arrive <- c.id
	}
}

func (c *client) exec(o *op) {
	d := c.d
	d.ops.Add(1)
	d.counts[o.Kind].Add(1)
	d.hist.add("%s", o)
	c.cur = o.Step
	switch o.Kind {
	case opCreate:
		c.create(o)
	case opAppend:
		c.appendOp(o)
	case opShared:
		c.sharedAppend(o)
	case opGet:
		c.get(o)
	case opList:
		c.list(o)
	case opUserState:
		c.userState(o)
	case opDelete:
		c.deleteOp(o)
	case opRewind:
		c.rewind(o)
	case opEndInv:
		c.endInvocation(o)
	case opADK:
		c.adkAppend(o)
	case opFlush:
		if c.flush(o) {
			c.log("flushed")
		}
	case opInFlight:
		c.heal()
		c.settleAll(true)
		c.inFlight(o)
	case opRedisRestart, opFailover:
		// The fault hits the next operation: it runs while the server goes down or switches.
		req := &faultReq{op: o, done: make(chan error, 1)}
		d.faults <- req
		next := c.gen.next()
		for next.Kind.fault() {
			if next.Kind == opPgStart { // a fault that ends another one still runs
				c.exec(next)
			}
			next = c.gen.next()
		}
		c.exec(next)
		if err := <-req.done; err != nil {
			c.failf(o, "%v", err)
		}
		end := &faultReq{op: o, end: true, done: make(chan error, 1)}
		d.faults <- end
		if err := <-end.done; err != nil {
			c.failf(o, "%v", err)
		}
	default:
		if o.Kind == opSnapshot || o.Kind == opRegress {
			// What Redis held at the snapshot is known only of settled
			// operations (the model holds no unsettled one).
			c.heal()
			c.settleAll(true)
		}
		req := &faultReq{op: o, done: make(chan error, 1)}
		d.faults <- req
		if err := <-req.done; err != nil {
			c.failf(o, "%v", err)
		}
	}
}

// ---------------------------------------------------------------------------
// Sessions: create, get, delete.

func (c *client) create(o *op) {
	d := c.d
	sl := c.opSlot(c.slots[o.Slot])
	if sl == nil {
		return
	}
	k := sl.key
	if d.blocked(k) {
		c.log("skipped: a snapshot of Redis waits for its regress")
		return
	}
	exists := d.m.session(k) != nil
	d.m.sent(k, o.State)
	d.markCreated(k) // before the call: another client's list may see it before the answer comes
	ctx, cancel := opCtx()
	defer cancel()
	before := time.Now()
	resp, err := d.e.svcs[o.Svc].Create(ctx, &service.CreateRequest{AppName: k.App, UserID: k.User, SessionID: k.SID, State: o.State})
	switch {
	case exists && errors.Is(err, service.ErrAlreadyExists):
		c.log("already exists")
	case c.faultErr(o, err):
		if !exists {
			c.addPending(&pending{op: o, key: k, kind: opCreate, since: before})
		}
	case exists:
		c.failf(o, "create of an existing session: %v, want ErrAlreadyExists", err)
	case err != nil:
		c.failf(o, "create: %v", err)
	default:
		c.adoptCreate(o, sl, resp.Session, before, false, nil)
	}
}

// adoptCreate records an acknowledged (or settled) create and checks the
// handle; lag: found stored by a settle (ErrAlreadyExists), raced: its keys
// written since its first attempt (Model.racedSince).
func (c *client) adoptCreate(o *op, sl *slot, s *service.Session, before time.Time, lag bool, raced map[string]any) {
	d := c.d
	k := sl.key
	inc := s.LastUpdateTime().UnixMicro()
	if inc < before.Add(-time.Second).UnixMicro() || inc > time.Now().Add(time.Second).UnixMicro() {
		c.failf(o, "create time %v outside the call (%v)", s.LastUpdateTime(), before)
	}
	if lag {
		_, _, app, _ := split(o.State)
		d.m.appMayLag(k.App, app)
	}
	d.m.created(k, inc, o.State)
	d.m.mayReadAs(raced)
	sl.addHandle(&handle{s: s, inc: inc})
	c.log("created, incarnation %d", inc)
	if s.Events().Len() != 0 {
		c.failf(o, "a new session has %d events", s.Events().Len())
	}
	if diffs := d.m.stateDiff(k, stateOf(s), c.me(), true, ""); len(diffs) > 0 {
		c.failf(o, "state of the created session: %s", strings.Join(diffs, "; "))
	}
}

// me is the client whose keys must read exactly: every key when it is alone.
func (c *client) me() int {
	if c.d.sh.Clients == 1 || c.all {
		return -1
	}
	return c.id
}

// get reads a slot's session with the op's window and checks it.
func (c *client) get(o *op) {
	sl := c.opSlot(c.slots[o.Slot])
	if sl == nil {
		return
	}
	c.fetch(o, sl, o.NumRecent, o.AfterMode, o.TempMode)
	if o.Pick%3 == 0 {
		c.compacted(o, sl)
	}
}

// compacted reads sl's session as a compacted view (Get{Compacted: true},
// from Redis's compaction index, the whole history when Redis holds none,
// or a cold read) and holds it to CompactedView of a whole read right after
// it, from the same process, when the two saw the same session (its last
// update time and state unchanged: nothing appended, rewound or lost in
// between). The whole read is held to the model by fetch's checks.
func (c *client) compacted(o *op, sl *slot) {
	k := sl.key
	ctx, cancel := opCtx()
	defer cancel()
	svc := c.d.e.svcs[o.Svc]
	req := service.GetRequest{AppName: k.App, UserID: k.User, SessionID: k.SID, Compacted: true}
	resp, err := svc.Get(ctx, &req)
	switch {
	case c.faultErr(o, err), errors.Is(err, service.ErrNotFound):
		return
	case err != nil:
		c.failf(o, "compacted get: %v", err)
		return
	}
	c.d.views.Add(1)
	view := resp.Session
	req.Compacted = false
	if resp, err = svc.Get(ctx, &req); err != nil {
		if !c.faultErr(o, err) && !errors.Is(err, service.ErrNotFound) {
			c.failf(o, "get after a compacted get: %v", err)
		}
		return
	}
	whole := resp.Session
	if !view.LastUpdateTime().Equal(whole.LastUpdateTime()) || !reflect.DeepEqual(stateOf(view), stateOf(whole)) {
		c.log("compacted: the session changed between the two reads")
		return
	}
	c.d.viewsCompared.Add(1)
	want, got := eventForms(service.CompactedView(eventsOf(whole))), eventForms(eventsOf(view))
	if !slices.Equal(want, got) {
		c.d.dump(k)
		c.failf(o, "compacted get: %d events, CompactedView of the whole read (%d events) has %d:\n got  %s\n want %s",
			len(got), whole.Events().Len(), len(want), strings.Join(got, "\n      "), strings.Join(want, "\n      "))
		return
	}
	c.log("compacted: %d of %d events, as CompactedView of the whole read", len(got), whole.Events().Len())
}

// eventForms is each event's API form as jsonEqual compares contents: its
// objects' members in key order (a cold read's come back from jsonb, which
// orders them its own way), numbers as float64 and inline data in base64's
// standard alphabet (normBytes: a cold read's come back URL-safe).
func eventForms(events []*service.Event) []string {
	out := make([]string, len(events))
	for i, ev := range events {
		b, err := json.Marshal(ev)
		if err == nil {
			var v any
			if err = json.Unmarshal(b, &v); err == nil {
				b, err = json.Marshal(normBytes(v))
			}
		}
		if err != nil {
			b = []byte(err.Error())
		}
		out[i] = string(b)
	}
	return out
}

// fetch runs a Get and checks it against the model; a live session becomes
// a new handle of the slot.
func (c *client) fetch(o *op, sl *slot, n, afterMode, tempMode int) *handle {
	d := c.d
	k := sl.key
	s := d.m.session(k)
	req := &service.GetRequest{AppName: k.App, UserID: k.User, SessionID: k.SID, NumRecentEvents: n}
	after := int64(-1)
	if s != nil {
		after = afterBound(s.Events, afterMode, o.Pick)
		switch {
		case tempMode == 1 && s.TInv != "":
			req.InvocationID = s.TInv
		case tempMode == 2:
			req.InvocationID = "inv-other"
		}
	}
	if after >= 0 {
		req.After = time.UnixMicro(after).UTC()
	}
	ctx, cancel := opCtx()
	defer cancel()
	resp, err := d.e.svcs[o.Svc].Get(ctx, req)
	switch {
	case c.faultErr(o, err):
		return nil
	case s == nil && errors.Is(err, service.ErrNotFound):
		c.log("not found")
		return nil
	case s == nil:
		c.failf(o, "get of a deleted or never created session: %v, want ErrNotFound", err)
		return nil
	case err != nil:
		c.failf(o, "get: %v", err)
		return nil
	}
	got := resp.Session
	if d.m.readBack(k, false) {
		s = d.m.session(k) // the read put back the database's: one view
	}
	diffs, matched := d.m.readDiff(k, s, got, n, after, c.me(), true, req.InvocationID)
	if len(diffs) > 0 {
		d.dump(k)
		c.failf(o, "get (n=%d after=%d inv=%q): %s", n, after, req.InvocationID, strings.Join(diffs, "; "))
		return nil
	}
	c.log("got %d of %d events, rev %d", got.Events().Len(), len(s.Events), s.rev())
	h := d.readHandle(k, s, got, matched)
	sl.addHandle(h)
	return h
}

// readHandle is the handle a read of k gave (got), which matched the views
// named.
func (d *driver) readHandle(k sessKey, s *mSession, got *service.Session, matched [][]*mEvent) *handle {
	return &handle{s: got, inc: s.Inc, rev: readRev(matched), ofCopy: s.Behind, conflicted: s.Behind && d.conflicted(k)}
}

// afterBound resolves an After window mode against the events (-1: none).
func afterBound(evs []*mEvent, mode, pick int) int64 {
	if len(evs) == 0 || mode == 0 {
		return -1
	}
	switch mode {
	case 1:
		return evs[pick%len(evs)].Ts
	case 2:
		return evs[pick%len(evs)].Ts + 1
	case 3:
		return max(evs[0].Ts-1, 1)
	default:
		return evs[len(evs)-1].Ts + 1
	}
}

func (c *client) deleteOp(o *op) {
	d := c.d
	sl := c.opSlot(c.slots[o.Slot])
	if sl == nil {
		return
	}
	k := sl.key
	if d.blocked(k) {
		c.log("skipped: a snapshot of Redis waits for its regress")
		return
	}
	ctx, cancel := opCtx()
	defer cancel()
	if o.Pick%6 == 0 {
		// With another user: removes nothing (the checkpoint reads the session back).
		err := d.e.svcs[o.Svc].Delete(ctx, &service.DeleteRequest{AppName: k.App, UserID: "someone-else", SessionID: k.SID})
		if !c.faultErr(o, err) && err != nil {
			c.failf(o, "delete with another user: %v", err)
		}
		c.log("deleted with another user: nothing")
		return
	}
	err := d.e.svcs[o.Svc].Delete(ctx, &service.DeleteRequest{AppName: k.App, UserID: k.User, SessionID: k.SID})
	switch {
	case c.faultErr(o, err):
		c.addPending(&pending{op: o, key: k, kind: opDelete})
	case err != nil:
		c.failf(o, "delete: %v", err)
	default:
		c.deleted(k)
	}
}

func (c *client) deleted(k sessKey) {
	if s := c.d.m.session(k); s != nil {
		c.d.remember(k, s.Events)
	}
	c.d.m.deleted(k)
	c.log("deleted")
}

// ---------------------------------------------------------------------------
// Unacknowledged operations: settled by reading what was stored, then by
// retrying (a retried append carries the same event id).

type pending struct {
	op    *op
	key   sessKey
	kind  opKind
	h     *handle
	ev    *service.Event // the event as sent (appends)
	inv   string         // rewind: the invocation; end-invocation: the invocation
	want  outcome        // what the model predicted (appends)
	since time.Time
	// writes: the acknowledged writes of the op's user and app keys when
	// it became pending (Model.writesOf).
	writes map[string]int
}

// delta is what p's operation sent to the user and app scopes (and more).
func (p *pending) delta() map[string]any {
	switch {
	case p.kind == opCreate:
		return p.op.State
	case p.ev != nil:
		return p.ev.Actions.StateDelta
	}
	return nil
}

// addPending leaves p to be settled; until it is, its user and app keys may
// read as it sent them (Model.unsettled).
func (c *client) addPending(p *pending) {
	p.writes = c.d.m.writesOf(p.key, p.delta())
	c.d.m.unsettled(p, p.key, p.delta())
	c.pending = append(c.pending, p)
}

// settleAll tries every unsettled operation once, or, with block, until all
// are settled (the faults have ended by then).
func (c *client) settleAll(block bool) {
	deadline := time.Now().Add(settleTimeout)
	for len(c.pending) > 0 && !c.d.stopped() {
		// A settle may send its operation again and, on a fault, leave it
		// pending anew (c.pending): kept (standalone concurrent seed
		// 624394450953 lost one, and its stored event was taken for one
		// never sent).
		current := c.pending
		c.pending = nil
		var left []*pending
		for _, p := range current {
			if !c.settle(p) {
				left = append(left, p)
				continue
			}
			c.d.m.settled(p)
		}
		c.pending = append(left, c.pending...)
		left = c.pending
		if !block || len(left) == 0 {
			return
		}
		if time.Now().After(deadline) {
			c.failf(left[0].op, "not settled after %v", settleTimeout)
			return
		}
		time.Sleep(100 * time.Millisecond) // retry pace while a server comes back
	}
}

// settle resolves one unacknowledged operation; false: try again later.
func (c *client) settle(p *pending) bool {
	d := c.d
	o := p.op
	ctx, cancel := opCtx()
	defer cancel()
	c.log("settling %s", o)
	k := p.key
	switch p.kind {
	case opCreate:
		resp, err := d.e.svcs[o.Svc].Create(ctx, &service.CreateRequest{AppName: k.App, UserID: k.User, SessionID: k.SID, State: o.State})
		switch {
		case isFault(err):
			c.log("still failing: %v", err)
			return false
		case err == nil:
			c.adoptCreate(o, c.slotOf(k), resp.Session, p.since, false, nil)
		case errors.Is(err, service.ErrAlreadyExists):
			// The first attempt created it; its app: step may be done by the flusher only.
			got, err := d.e.svcs[o.Svc].Get(ctx, &service.GetRequest{AppName: k.App, UserID: k.User, SessionID: k.SID})
			if isFault(err) {
				c.log("still failing: %v", err)
				return false
			}
			if err != nil {
				c.failf(o, "settle create: get: %v", err)
				return true
			}
			c.adoptCreate(o, c.slotOf(k), got.Session, p.since, true, d.m.racedSince(k, o.State, p.writes))
		default:
			c.failf(o, "settle create: %v", err)
		}
		return true
	case opDelete:
		err := d.e.svcs[o.Svc].Delete(ctx, &service.DeleteRequest{AppName: k.App, UserID: k.User, SessionID: k.SID})
		if isFault(err) {
			c.log("still failing: %v", err)
			return false
		}
		if err != nil {
			c.failf(o, "settle delete: %v", err)
			return true
		}
		c.deleted(k)
		return true
	case opEndInv:
		if err := d.e.svcs[o.Svc].EndInvocation(ctx, p.h.s, p.inv); isFault(err) {
			c.log("still failing: %v", err)
			return false
		} else if err != nil {
			c.failf(o, "settle end-invocation: %v", err)
			return true
		}
		c.endedInvocation(k, p.inv)
		return true
	case opAppend:
		return c.settleAppend(p)
	case opRewind:
		return c.settleRewind(p)
	case opShared:
		return c.settleShared(p)
	}
	return true
}

// readAll reads every event of a session (nil, false on a fault).
func (c *client) readAll(o *op, k sessKey) (*service.Session, bool) {
	ctx, cancel := opCtx()
	defer cancel()
	resp, err := c.d.e.svcs[o.Svc].Get(ctx, &service.GetRequest{AppName: k.App, UserID: k.User, SessionID: k.SID})
	switch {
	case isFault(err):
		c.log("still failing: %v", err)
		return nil, false
	case errors.Is(err, service.ErrNotFound) && c.d.m.session(k) == nil:
		c.log("settled: no such session")
		return nil, true
	case err != nil:
		c.failf(o, "settle: read the session: %v", err)
		return nil, true
	}
	return resp.Session, true
}

// newEvents checks a full read against the model's events and returns the
// events after them.
func (c *client) newEvents(o *op, k sessKey, got *service.Session) ([]*service.Event, bool) {
	s := c.d.m.session(k)
	evs := eventsOf(got)
	var first []string
	for i, view := range s.views() {
		diffs := prefixDiff(view, evs)
		if len(diffs) == 0 {
			return evs[len(view):], true
		}
		if i == 0 {
			first = diffs
		}
	}
	c.d.dump(k)
	c.failf(o, "settle: %s", strings.Join(first, "; "))
	return nil, false
}

// prefixDiff tells how the events read (evs) do not begin with the
// model's (want).
func prefixDiff(want []*mEvent, evs []*service.Event) []string {
	if len(evs) < len(want) {
		var got, w []string
		for _, e := range evs {
			got = append(got, fmt.Sprintf("%s@%d", e.ID, e.Timestamp.UnixMicro()))
		}
		for _, e := range want {
			w = append(w, fmt.Sprintf("%s@%d", e.ID, e.Ts))
		}
		return []string{fmt.Sprintf("%d events stored %q, %d acknowledged %q", len(evs), got, len(want), w)}
	}
	for i, e := range want {
		if diffs := diffEvent(e, evs[i]); len(diffs) > 0 {
			return []string{fmt.Sprintf("event %d: %s", i, strings.Join(diffs, "; "))}
		}
	}
	return nil
}

func (c *client) slotOf(k sessKey) *slot {
	for _, sl := range c.slots {
		if sl.key == k {
			return sl
		}
	}
	for _, sl := range c.shared {
		if sl.key == k {
			return sl
		}
	}
	panic("no slot for " + k.String())
}

// heal asks the main goroutine to end the faults that last (Postgres down),
// so that what is unsettled can be settled.
func (c *client) heal() {
	req := &faultReq{op: &op{Kind: opPgStart, Client: c.id}, done: make(chan error, 1)}
	c.d.faults <- req
	<-req.done
}

// ---------------------------------------------------------------------------
// Faults, carried out by the main goroutine.

type faultReq struct {
	op   *op
	end  bool // second half of redis-restart / failover
	done chan error
}

// serveFault carries out one fault request (on the test goroutine).
func (d *driver) serveFault(r *faultReq) {
	o := r.op
	e := d.e
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var err error
	switch o.Kind {
	case opEvict:
		err = d.evict(ctx, o)
	case opFlushAll:
		d.pgStart() // FLUSHALL only after a complete flush
		if err = e.flush(ctx); err == nil {
			d.m.allTempLost() // before the loss, as for an eviction
			if err = e.flushAll(ctx); err == nil {
				d.m.allCopiesGone()
			}
		}
		d.m.flushed()
		d.hist.add("  fault: flushed, then FLUSHALL: %v", err)
	case opFlusherKill:
		e.killFlusher(o.Delay)
		d.hist.add("  fault: flusher killed after %v", o.Delay)
	case opPgStop:
		if !d.pgDown {
			d.faultBegin()
			e.pg.Stop(d.t, o.Mode)
			d.pgDown = true
			d.hist.add("  fault: postgres stopped (%s)", o.Mode)
		}
	case opPgStart:
		d.pgStart()
	case opSnapshot:
		d.pgStart()
		err = d.takeSnapshot(ctx, o.Mode, o.Slot)
	case opRegress:
		d.pgStart()
		err = d.regress(ctx, false)
	case opInFlight:
		err = d.inFlight(ctx, o)
	case opRedisRestart, opFailover:
		switch {
		case r.end && e.cluster == nil && o.Kind == opRedisRestart:
			e.redis.Start(d.t)
			err = e.waitRedis(time.Minute)
			d.hist.add("  fault: redis restarted from its AOF: %v", err)
			d.faultEnd()
		case r.end:
		case e.cluster != nil && d.heldReplica():
			// Every node's view is needed to fail over (readyReplica); the
			// next checkpoint ends the hold.
			d.hist.add("  fault: no failover: a replica is held behind")
		case e.cluster != nil:
			d.faultBegin()
			time.Sleep(o.Delay) // into the next operation
			var waited time.Duration
			waited, err = e.failover(o.Pick)
			d.hist.add("  fault: failover of master %d (a replica ready after %v): %v", o.Pick%3, waited.Round(time.Millisecond), err)
			d.faultEnd()
		case o.Kind == opRedisRestart:
			d.faultBegin()
			time.Sleep(o.Delay) // into the next operation
			e.redis.Kill(d.t)
			d.hist.add("  fault: redis killed (SIGKILL)")
		}
	}
	r.done <- err
}

// pgStart starts Postgres again if a fault stopped it (test goroutine).
func (d *driver) pgStart() {
	if !d.pgDown {
		return
	}
	d.e.pg.Start(d.t)
	d.pgDown = false
	d.hist.add("  fault: postgres started")
	d.faultEnd()
}

// evict deletes keys that carry a TTL, as volatile-lru may, and tells the
// model which sessions may have lost their temp state.
func (d *driver) evict(ctx context.Context, o *op) error {
	var keys []string
	if err := faultRetry(ctx, func() (err error) {
		keys, err = d.e.keysWithTTL(ctx)
		return err
	}); err != nil {
		return err
	}
	rng := rand.New(rand.NewPCG(uint64(o.Pick), uint64(o.Step)))
	if o.Count > 0 && o.Count < len(keys) {
		rng.Shuffle(len(keys), func(i, j int) { keys[i], keys[j] = keys[j], keys[i] })
		keys = keys[:o.Count]
		sort.Strings(keys)
	}
	owners := d.keyOwners()
	var gone []string
	for _, key := range keys {
		// The model hears of the loss before it happens: a client's read
		// that sees the key gone must not be checked against a model that
		// still holds its temp state as sure (standalone concurrent seed
		// 899785822333: a Get ran while this fault was under way).
		if w, found := owners[key]; found {
			d.m.tempLostOf(w.key)
		}
		ok, err := d.e.evict(ctx, key)
		if err != nil {
			return err
		}
		if ok {
			gone = append(gone, key)
			if w, found := owners[key]; found && w.copy != keepsCopy {
				d.m.copyGone(w.key, w.copy == appendsReadBack)
			}
		}
	}
	d.hist.add("  fault: evicted %d keys: %q", len(gone), gone)
	return nil
}

// keyOwners maps the keys of every session to it. Losing any of them may
// lose the session's temp state: the temp hash itself carries a TTL, and a
// session read back after a partial eviction no longer names the invocation
// that owns it (hydrate.lua writes the session hash anew).
func (d *driver) keyOwners() map[string]keyOwner {
	out := map[string]keyOwner{}
	for _, c := range d.clients {
		for _, sl := range append(append([]*slot(nil), c.slots...), c.shared...) {
			sk := d.e.keys.Session(sl.key.App, sl.key.User, sl.key.SID)
			for _, key := range []string{sk.Session, sk.Events} {
				out[key] = keyOwner{key: sl.key, copy: readsReadBack}
			}
			out[sk.EventIDs] = keyOwner{key: sl.key, copy: appendsReadBack}
			for _, key := range []string{sk.Temp, sk.Undo} {
				out[key] = keyOwner{key: sl.key}
			}
		}
	}
	return out
}

// keyOwner is the session a key belongs to, and what its loss does to an
// older copy of the session Redis holds.
type keyOwner struct {
	key  sessKey
	copy copyLoss
}

// copyLoss: whether a key's loss ends an older copy of its session, and at
// which call.
type copyLoss int

const (
	keepsCopy copyLoss = iota // the temp hash, the undo records
	// readsReadBack: the session hash or its events; get.lua and
	// append.lua find the session gone or partly evicted, and the call
	// reads the database's back.
	readsReadBack
	// appendsReadBack: the event ids; append.lua counts them (get.lua
	// does not: a read still answers the copy's events), and the append
	// reads the database's back.
	appendsReadBack
)

// dump writes what Redis and Postgres hold of session k into the history,
// for a failure's post-mortem.
func (d *driver) dump(k sessKey) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	sk := d.e.keys.Session(k.App, k.User, k.SID)
	meta, err := d.e.rdb.HGetAll(ctx, sk.Session).Result()
	var m []string
	for f, v := range meta {
		if strings.HasPrefix(f, "m:") {
			m = append(m, f+"="+v)
		}
	}
	sort.Strings(m)
	d.hist.add("  dump %v: redis meta %v (%v)", k, m, err)
	evs, err := d.e.rdb.ZRangeWithScores(ctx, sk.Events, 0, -1).Result()
	var seqs []string
	for _, z := range evs {
		member, _ := z.Member.(string)
		seq, _, _ := strings.Cut(member, ":")
		seqs = append(seqs, fmt.Sprintf("%s@%.0f", seq, z.Score))
	}
	d.hist.add("  dump %v: redis events (seq@ts) %v (%v)", k, seqs, err)
	var inc, rev int64
	var deleted bool
	err = d.e.db.QueryRowContext(ctx, `SELECT incarnation, rev, deleted FROM adksession_sessions WHERE app_name = $1 AND user_id = $2 AND session_id = $3`,
		k.App, k.User, k.SID).Scan(&inc, &rev, &deleted)
	d.hist.add("  dump %v: db bookkeeping incarnation %d rev %d deleted %v (%v)", k, inc, rev, deleted, err)
	var rows []string
	err = queryRows(ctx, d.e.db, fmt.Sprintf(`SELECT id, %s FROM events WHERE app_name = '%s' AND user_id = '%s' AND session_id = '%s' ORDER BY "timestamp"`,
		usExpr(`"timestamp"`), sqlQuote(k.App), sqlQuote(k.User), sqlQuote(k.SID)), func(r *sql.Rows) error {
		var id string
		var us int64
		err := r.Scan(&id, &us)
		rows = append(rows, fmt.Sprintf("%s@%d", id, us))
		return err
	})
	d.hist.add("  dump %v: db events %v (%v)", k, rows, err)
	user, err := d.e.rdb.HGetAll(ctx, sk.User).Result()
	d.hist.add("  dump %v: redis user hash %v (%v)", k, sortedPairs(user), err)
	var state string
	var urev, flushes int64
	err = d.e.db.QueryRowContext(ctx, `SELECT u.state::text, coalesce(s.rev, 0), coalesce(s.flushes, 0) FROM user_states u
LEFT JOIN adksession_states s ON s.app_name = u.app_name AND s.user_id = u.user_id WHERE u.app_name = $1 AND u.user_id = $2`,
		k.App, k.User).Scan(&state, &urev, &flushes)
	d.hist.add("  dump %v: db user state %s, rev %d, flushes %d (%v)", k, state, urev, flushes, err)
}

// sortedPairs is m as "key=value" pairs in key order.
func sortedPairs(m map[string]string) []string {
	out := make([]string, 0, len(m))
	for k, v := range m {
		out = append(out, k+"="+v)
	}
	sort.Strings(out)
	return out
}

func sqlQuote(s string) string { return strings.ReplaceAll(s, "'", "''") }
