package integration

// Redis faults that must lose nothing acknowledged (docs/design.md, "Redis faults"): a
// redis-server killed (SIGKILL) and restarted with AOF, and a Redis Cluster
// master failed over, each under a concurrent append load. Every event
// carries an id the test chose, so what is stored can be compared with what
// was acknowledged event by event: every acknowledged event is stored once,
// in order, with its state; anything else stored is an attempt that
// returned an error (not acknowledged, but maybe applied).

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/adksession/adksession/integration/testenv"
	"github.com/adksession/adksession/service"
)

// ledger records every append attempt of a fault test by event id: those
// acknowledged (the event as acknowledged), and those that returned an
// error (maybe applied; a retry with the same id may be acknowledged later).
type ledger struct {
	mu       sync.Mutex
	deltas   map[string]map[string]any    // every attempted id
	acked    map[string]*service.Event    // acknowledged ids
	order    map[sessKey][]*service.Event // acknowledged events per session, in acknowledgement order
	errored  map[string]error             // ids of attempts that returned an error, with the last one
	failures atomic.Int64
	firstErr atomic.Value
}

func newLedger() *ledger {
	return &ledger{deltas: map[string]map[string]any{}, acked: map[string]*service.Event{},
		order: map[sessKey][]*service.Event{}, errored: map[string]error{}}
}

// faultDelta is the delta of event id, number j of session sid: keys of its
// own in every scope (so the stored state shows every applied event), and
// keys every event of the session overwrites (so it shows their order).
func faultDelta(sid, id string, j int) map[string]any {
	return map[string]any{
		"last": id, "e:" + id: j,
		"user:last-" + sid: id, "user:e:" + id: j,
		"app:e:" + id: j,
	}
}

// attempt appends event id to sess once and records the outcome.
func (l *ledger) attempt(ctx context.Context, svc *service.Service, sess *service.Session, id string, delta map[string]any) error {
	k := sessKey{sess.AppName(), sess.UserID(), sess.ID()}
	l.mu.Lock()
	l.deltas[id] = delta
	l.mu.Unlock()
	ev := &service.Event{ID: id, InvocationID: "inv-" + sess.ID(), Author: "model",
		Content: json.RawMessage(fmt.Sprintf(`{"role":"model","parts":[{"text":%q}]}`, "event "+id)),
		Actions: service.EventActions{StateDelta: delta}}
	err := svc.AppendEvent(ctx, sess, ev)
	l.mu.Lock()
	defer l.mu.Unlock()
	if err != nil {
		l.errored[id] = err
		l.failures.Add(1)
		l.firstErr.CompareAndSwap(nil, err.Error())
		return err
	}
	l.acked[id] = ev.Clone()
	l.order[k] = append(l.order[k], ev.Clone())
	return nil
}

func (l *ledger) ackedCount() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.acked)
}

func (l *ledger) ackedOf(k sessKey) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.order[k])
}

// appendLoad is a steady load: one goroutine per group of sessions, each
// appending to its sessions in turn every few milliseconds.
type appendLoad struct {
	stop      chan struct{}
	wg        sync.WaitGroup
	slowest   atomic.Int64 // ns, longest time from first attempt to acknowledgement of one event (retry mode)
	abandoned atomic.Int64 // events given up after an error (no-retry mode)
}

// startLoad starts the load through svc. With retry, an attempt that
// returned an error is repeated with the same id until acknowledged;
// without, the worker moves on to the next event.
func startLoad(t *testing.T, l *ledger, svc *service.Service, groups [][]*service.Session, retry bool) *appendLoad {
	ld := &appendLoad{stop: make(chan struct{})}
	ctx := wbCtx(t)
	for _, own := range groups {
		ld.wg.Add(1)
		go func() {
			defer ld.wg.Done()
			tick := time.NewTicker(10 * time.Millisecond)
			defer tick.Stop()
			next := map[string]int{}
			for i := 0; ; i++ {
				select {
				case <-ld.stop:
					return
				case <-tick.C:
				}
				s := own[i%len(own)]
				j := next[s.ID()]
				next[s.ID()]++
				id := fmt.Sprintf("%s/%s#%d", s.UserID(), s.ID(), j)
				delta := faultDelta(s.ID(), id, j)
				began := time.Now()
				for l.attempt(ctx, svc, s, id, delta) != nil {
					if !retry {
						ld.abandoned.Add(1)
						break
					}
					select {
					case <-ld.stop:
						return
					case <-time.After(20 * time.Millisecond): // retry pace, not a wait for a condition
					}
				}
				if d := int64(time.Since(began)); d > ld.slowest.Load() {
					ld.slowest.Store(d)
				}
			}
		}()
	}
	return ld
}

func (ld *appendLoad) Stop() {
	close(ld.stop)
	ld.wg.Wait()
}

// waitUntil polls cond every 10 ms and fails the test after timeout.
func waitUntil(t testing.TB, timeout time.Duration, what string, cond func() bool) time.Duration {
	t.Helper()
	began := time.Now()
	for !cond() {
		require.Less(t, time.Since(began), timeout, "timed out waiting for %s", what)
		time.Sleep(10 * time.Millisecond)
	}
	return time.Since(began)
}

// checkStored compares what svc's Get returns for every session with the
// ledger: event ids stored once each, only ids that were attempted, every
// acknowledged event present and in order, as acknowledged. It then records
// what is stored in e.model (the acknowledged events and the stored
// unacknowledged ones, in stored order) and checks each session's events and
// state against it. Without a database nothing repairs the app: delta of an
// event whose first step was applied but not acknowledged, so such a delta
// is expected only when Redis has it. It returns the number of stored
// unacknowledged events, and of those stored without their app: delta.
func checkStored(t *testing.T, e *wbEnv, svc *service.Service, l *ledger, sessions []*service.Session) (unacked, noApp int) {
	t.Helper()
	ctx := wbCtx(t)
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, s := range sessions {
		k := sessKey{s.AppName(), s.UserID(), s.ID()}
		got, err := svc.Get(ctx, &service.GetRequest{AppName: k.app, UserID: k.user, SessionID: k.sid})
		require.NoError(t, err, "get %v", k)
		stored := slices.Collect(got.Session.Events().All())
		seen := map[string]bool{}
		var acked []*service.Event
		for _, ev := range stored {
			require.False(t, seen[ev.ID], "event %s stored twice in %v", ev.ID, k)
			seen[ev.ID] = true
			require.Contains(t, l.deltas, ev.ID, "stored event %s of %v was never appended", ev.ID, k)
			if l.acked[ev.ID] != nil {
				acked = append(acked, ev)
			} else {
				require.Contains(t, l.errored, ev.ID, "event %s", ev.ID)
			}
		}
		require.Equal(t, eventSummaries(l.order[k]), eventSummaries(acked), "acknowledged events of %v, in order", k)
		state := stateMap(got.Session)
		for _, ev := range stored {
			delta := l.deltas[ev.ID]
			if l.acked[ev.ID] == nil {
				unacked++
				if e.db == nil {
					delta = maps.Clone(delta)
					for key := range delta {
						if _, ok := state[key]; strings.HasPrefix(key, "app:") && !ok {
							delete(delta, key)
							noApp++
						}
					}
				}
			}
			e.model.appended(s, ev, delta)
		}
	}
	for _, s := range sessions {
		e.checkGet(svc, sessKey{s.AppName(), s.UserID(), s.ID()}, 0, time.Time{})
	}
	return unacked, noApp
}

// isDialError tells whether err is a refused dial (go-redis's circuit
// breaker returns the last one while it is open): the command never reached
// Redis.
func isDialError(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) && op.Op == "dial"
}

// TestFaultRedisRestartAOF: a redis-server with appendfsync always killed
// (SIGKILL) under a concurrent append load, then restarted on its files:
// the same Service carries on (go-redis reconnects, scripts are loaded again
// on NOSCRIPT), a fresh Service too, and nothing acknowledged is lost.
func TestFaultRedisRestartAOF(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		db   bool
	}{{"RedisOnly", false}, {"Postgres", true}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			srv := testenv.StartRedis(t, "--appendonly", "yes", "--appendfsync", "always")
			dbURL := ""
			if tc.db {
				dbURL = testenv.FreshDatabase(t)
			}
			testRedisRestart(t, srv, newWB(t, srv.URL, dbURL, concurrentAppends))
		})
	}
}

func testRedisRestart(t *testing.T, srv *testenv.RedisServer, e *wbEnv) {
	ctx := wbCtx(t)
	l := newLedger()
	var groups [][]*service.Session
	var sessions []*service.Session
	for w := range 3 {
		var own []*service.Session
		for i := range 2 {
			s := e.create(e.svc, "app", fmt.Sprint("u", (w+i)%3), fmt.Sprintf("w%d-s%d", w, i),
				map[string]any{"init": w, fmt.Sprintf("user:init-w%d-s%d", w, i): i})
			own = append(own, s)
			sessions = append(sessions, s)
		}
		groups = append(groups, own)
	}
	probe := e.create(e.svc, "app", "u0", "probe", nil)
	sessions = append(sessions, probe)

	ld := startLoad(t, l, e.svc, groups, false)
	waitUntil(t, time.Minute, "200 acknowledged appends before the kill", func() bool { return l.ackedCount() >= 200 })
	srv.Kill(t)
	killedAt := time.Now()
	atKill := l.ackedCount()
	failedAtKill := l.failures.Load()
	// Down until the load has seen appends fail, or for 5 s (an append
	// whose first step was stored waits for Redis to finish its app step).
	for l.failures.Load() < failedAtKill+3 && time.Since(killedAt) < 5*time.Second {
		time.Sleep(10 * time.Millisecond)
	}
	srv.Start(t)
	upAt := time.Now()
	// The first append after the restart that reaches Redis, through the
	// same Service, succeeds: no NOSCRIPT (the restarted server's script
	// cache is empty) and no broken pooled connection reaches the caller.
	// Before it, go-redis's dial circuit breaker (opened by the failed dials
	// of the outage, probed once a second) may still refuse to dial: those
	// attempts never reach Redis, and they are the only errors allowed.
	breaker := 0
	firstOK := waitUntil(t, 10*time.Second, "an append after the restart", func() bool {
		id := fmt.Sprint("probe#", breaker)
		err := l.attempt(ctx, e.svc, probe, id, faultDelta("probe", id, breaker))
		require.True(t, err == nil || isDialError(err), "append after the restart: %v", err)
		breaker++
		return err == nil
	})
	breaker--
	atUp := l.ackedCount()
	recovered := waitUntil(t, time.Minute, "the load acknowledged again after the restart", func() bool {
		return l.ackedCount() > atUp
	})
	waitUntil(t, time.Minute, "200 acknowledged appends after the restart", func() bool { return l.ackedCount() >= atUp+200 })
	ld.Stop()

	// A fresh Service (another process, or this one restarted) carries on
	// from handles it gets from Redis.
	fresh := e.open(e.cfg)
	for _, s := range sessions {
		got, err := fresh.Get(ctx, &service.GetRequest{AppName: s.AppName(), UserID: s.UserID(), SessionID: s.ID()})
		require.NoError(t, err)
		for j := range 5 {
			id := fmt.Sprintf("%s#fresh%d", s.ID(), j)
			require.NoError(t, l.attempt(ctx, fresh, got.Session, id, faultDelta(s.ID(), id, 1000+j)), "append through a fresh service")
		}
	}
	if e.db != nil {
		e.flush(e.svc)
	}
	unacked, noApp := checkStored(t, e, fresh, l, sessions)
	if e.db != nil {
		checkDB(t, e.db, e.model)
	}
	first, _ := l.firstErr.Load().(string)
	t.Logf("%d events acknowledged (%d before the kill), %d appends failed (%d stored all the same, not acknowledged, "+
		"%d app: keys of those missing); down %v; after Start: first append acknowledged in %v (%d attempts refused "+
		"by the dial breaker before), load acknowledged again in %v; first error: %s",
		l.ackedCount(), atKill, l.failures.Load(), unacked, noApp, upAt.Sub(killedAt).Round(time.Millisecond),
		firstOK.Round(time.Millisecond), breaker, recovered.Round(time.Millisecond), first)
	require.Positive(t, l.failures.Load(), "appends fail while Redis is down")
}

// TestFaultClusterFailover: a cluster master failed over (CLUSTER FAILOVER
// on its replica) under a concurrent append load across users of every
// master. Attempts that fail are retried with the same event id; every
// acknowledged event is stored once, in order.
func TestFaultClusterFailover(t *testing.T) {
	t.Parallel()
	for _, wait := range []int{0, 1} {
		t.Run(fmt.Sprint("WaitReplicas", wait), func(t *testing.T) { testClusterFailover(t, wait) })
	}
}

func testClusterFailover(t *testing.T, waitReplicas int) {
	cl := testenv.StartCluster(t)
	e := newWB(t, cl.URL, "", concurrentAppends)
	if waitReplicas > 0 {
		e.cfg.WaitReplicas = waitReplicas
		e.svc = e.open(e.cfg)
	}
	ctx := wbCtx(t)
	cc, ok := e.rdb.(*redis.ClusterClient)
	require.True(t, ok)
	l := newLedger()

	var groups [][]*service.Session
	var sessions []*service.Session
	masters := map[string]int{} // master address -> sessions
	for w := range 6 {
		var own []*service.Session
		for i := range 3 {
			u := fmt.Sprintf("user-%d-%d", w, i)
			s := e.create(e.svc, "app", u, "s", map[string]any{"init": w, "user:init": i})
			own = append(own, s)
			sessions = append(sessions, s)
			m, err := cc.MasterForKey(ctx, e.keys.Session("app", u, "s").Session)
			require.NoError(t, err)
			masters[m.Options().Addr]++
		}
		groups = append(groups, own)
	}
	require.Len(t, masters, 3, "sessions on every master: %v", masters)

	// Fail over the master that holds the app state (the second step of
	// every append), so that both steps meet the switch.
	m, err := cc.MasterForKey(ctx, e.keys.App("app").State)
	require.NoError(t, err)
	oldMaster := m.Options().Addr
	replica := replicaOf(t, cl, oldMaster)

	ld := startLoad(t, l, e.svc, groups, true)
	waitUntil(t, time.Minute, "300 acknowledged appends before the failover", func() bool { return l.ackedCount() >= 300 })
	before := l.ackedCount()
	failedBefore := l.failures.Load()
	// A manual failover the master does not answer in time (5 s) is
	// abandoned silently: ask again after 6 s.
	var asked []time.Time
	switched := waitUntil(t, time.Minute, "the replica "+replica+" to become master", func() bool {
		if len(asked) == 0 || time.Since(asked[len(asked)-1]) > 6*time.Second {
			reply, err := testenv.RespDo(replica, "CLUSTER", "FAILOVER")
			require.NoError(t, err)
			require.Equal(t, "OK", reply)
			asked = append(asked, time.Now())
		}
		info, err := testenv.RespDo(replica, "INFO", "replication")
		return err == nil && testenv.InfoField(info, "role") == "master"
	})
	switched = time.Since(asked[len(asked)-1])
	atSwitch := map[sessKey]int{}
	for _, s := range sessions {
		k := sessKey{s.AppName(), s.UserID(), s.ID()}
		atSwitch[k] = l.ackedOf(k)
	}
	// Writes follow the new master at once: a graceful failover costs no
	// more than the switch (15 s leaves room for a loaded machine).
	progressed := waitUntil(t, 15*time.Second, "every session acknowledged 10 appends after the switch", func() bool {
		for k, n := range atSwitch {
			if l.ackedOf(k) < n+10 {
				return false
			}
		}
		return true
	})
	ld.Stop()
	info, err := testenv.RespDo(oldMaster, "INFO", "replication")
	require.NoError(t, err)
	require.Contains(t, info, "role:slave", "the old master %s is a replica now", oldMaster)

	unacked, _ := checkStored(t, e, e.svc, l, sessions)
	fresh := e.open(e.cfg)
	for _, s := range sessions {
		e.checkGet(fresh, sessKey{s.AppName(), s.UserID(), s.ID()}, 0, time.Time{})
	}
	first, _ := l.firstErr.Load().(string)
	t.Logf("%d events acknowledged (%d before the failover), %d attempts failed during the switch (retried; %d stored "+
		"but not acknowledged); replica %s master %v after CLUSTER FAILOVER (sent %d times); every session progressed 10 events after %v more; "+
		"slowest event %v; first error: %s",
		l.ackedCount(), before, l.failures.Load()-failedBefore, unacked, replica, switched.Round(time.Millisecond), len(asked),
		progressed.Round(time.Millisecond), time.Duration(ld.slowest.Load()).Round(time.Millisecond), first)
}

// replicaOf returns the address of a replica of the master at addr. Each
// node's own line of CLUSTER NODES ("<id> <ip:port@bus> myself,<flags>
// <master id> ...") is authoritative; other nodes' views lag behind gossip.
func replicaOf(t testing.TB, cl *testenv.RedisCluster, addr string) string {
	t.Helper()
	type node struct{ id, addr, flags, master string }
	self := func(a string) node {
		nodes, err := testenv.RespDo(a, "CLUSTER", "NODES")
		require.NoError(t, err)
		for _, line := range strings.Split(strings.TrimSpace(nodes), "\n") {
			if f := strings.Fields(line); len(f) >= 8 && strings.Contains(f[2], "myself") {
				return node{f[0], a, f[2], f[3]}
			}
		}
		t.Fatalf("no myself line in CLUSTER NODES of %s:\n%s", a, nodes)
		return node{}
	}
	master := self(addr)
	for _, a := range cl.Addrs {
		if n := self(a); strings.Contains(n.flags, "slave") && n.master == master.id {
			return a
		}
	}
	t.Fatalf("no replica of %s (%s)", addr, master.id)
	return ""
}
