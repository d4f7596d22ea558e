package integration

// A Redis Cluster node that the service's slot map still names a slot's
// master, dead after the cluster moved the slot on (docs/design.md, "Redis
// faults"): go-redis corrects its map on a MOVED, ASK or READONLY reply and
// otherwise every 60 s, and a dead node answers nothing. Found by the
// simulation (cluster single mode, seed 267720584799, op #385): a replica
// killed a few seconds after a failover had demoted it, and a flush's read of
// the change logs refused for 30 s.

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/adksession/adksession/cache"
	"github.com/adksession/adksession/integration/testenv"
	"github.com/adksession/adksession/service"
)

// followWithin bounds how long a call may fail once the cluster has a new
// master: well below go-redis's own reload (60 s after the service's map
// was loaded, which Open did moments before), so that only a reload the
// failures asked for can make it pass.
const followWithin = 20 * time.Second

// TestDeadMasterInSlotMap: a service's map names M the master of a
// session's slot; M then stops serving it (a failover demotes it and it
// dies, or it dies and its replica takes over) with no command of the
// service seeing a MOVED. Each kind of call, the first to meet the dead
// node, must reach the new master (within followWithin), and the data must
// be there: a single command of a client cache.NewClient built, a flusher's
// pass (its pipelines over every shard's log), Backlog (one such pipeline),
// the group commit of the write scripts (AppendEvent), a read (Get), and a
// write sent to a node the store picked itself (WaitReplicas).
func TestDeadMasterInSlotMap(t *testing.T) {
	t.Parallel()
	cl := testenv.StartCluster(t)
	cases := []struct {
		name     string
		takeover bool // M killed as master, its replica takes over; else demoted first, then killed
		wait     int  // Config.WaitReplicas
		call     func(d *deadMaster) error
	}{
		{"Demoted/Command", false, 0, func(d *deadMaster) error {
			n, err := d.rdb.Exists(wbCtx(d.t), d.wb.keys.Session(d.app, d.user, d.sid).Session).Result()
			if err == nil && n != 1 {
				return fmt.Errorf("EXISTS of the session hash: %d, want 1", n)
			}
			return err
		}},
		{"Demoted/FlushPass", false, 0, func(d *deadMaster) error {
			n, err := d.flusher.RunOnce(wbCtx(d.t))
			if err == nil && n == 0 {
				return errors.New("flush pass: nothing flushed, want the create and the append")
			}
			return err
		}},
		{"Demoted/Backlog", false, 0, func(d *deadMaster) error {
			b, err := d.svc.Backlog(wbCtx(d.t))
			if err == nil && b.Entries == 0 {
				return errors.New("backlog: no entries, want the unflushed create and append")
			}
			return err
		}},
		{"Demoted/Append", false, 0, (*deadMaster).append},
		{"Demoted/Get", false, 0, func(d *deadMaster) error {
			_, err := d.svc.Get(wbCtx(d.t), &service.GetRequest{AppName: d.app, UserID: d.user, SessionID: d.sid})
			return err
		}},
		{"Demoted/AppendWaitReplicas", false, 1, func(d *deadMaster) error {
			// The new master's one replica is the dead node: the write is
			// stored on it, not confirmed.
			if err := d.append(); !errors.Is(err, service.ErrNotReplicated) {
				return err
			}
			return nil
		}},
		{"TakenOver/Append", true, 0, (*deadMaster).append},
	}
	for i, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			d := newDeadMaster(t, cl, i, c.wait)
			if c.takeover {
				d.killAndTakeOver()
			} else {
				d.demoteAndKill()
			}
			var failed int
			var first error
			began := time.Now()
			for {
				err := c.call(d)
				if err == nil {
					break
				}
				if failed++; first == nil {
					first = err
				}
				require.Less(t, time.Since(began), followWithin, "%s still failing after %d calls: %v", c.name, failed, err)
				time.Sleep(10 * time.Millisecond)
			}
			t.Logf("the new master %s reached after %d failed calls (%v; the first: %v)", d.replica, failed,
				time.Since(began).Round(time.Millisecond), first)
			d.check()
		})
	}
}

// deadMaster is one case's service over cl: a session whose slot's master
// (master) goes, and the replica (replica) that takes the slot.
type deadMaster struct {
	t               testing.TB
	cl              *testenv.RedisCluster
	svc             *service.Service
	flusher         *service.Flusher
	rdb             redis.UniversalClient // a client of cache.NewClient's, its map loaded with the service's
	wb              *wbEnv
	app, user, sid  string
	master, replica string
	sess            *service.Session // the handle, caught up by each append
	appended        []string         // event ids acknowledged (or, with WaitReplicas, stored unconfirmed)
}

// newDeadMaster opens a service (no background flusher: nothing of it may
// meet the demoted node while it still answers MOVED) and creates a session
// with one event, unflushed.
func newDeadMaster(t *testing.T, cl *testenv.RedisCluster, i, waitReplicas int) *deadMaster {
	d := &deadMaster{t: t, cl: cl, app: "app", user: fmt.Sprintf("user-%d", i), sid: "s"}
	d.wb = newWB(t, cl.URL, testenv.FreshDatabase(t), func(c *service.Config) {
		c.DisableFlusher = true
		c.WaitReplicas = waitReplicas
	})
	d.svc = d.wb.svc
	d.flusher = d.svc.NewFlusher(nil)
	d.sess = d.wb.create(d.svc, d.app, d.user, d.sid, map[string]any{"init": 1})
	require.NoError(t, d.append())
	var err error
	d.rdb, err = cache.NewClient(cl.URL)
	require.NoError(t, err)
	t.Cleanup(func() { d.rdb.Close() })
	require.NoError(t, d.rdb.Ping(wbCtx(t)).Err())
	d.master = slotMaster(t, cl, d.wb.keys.Session(d.app, d.user, d.sid).Session)
	d.replica = replicaOf(t, cl, d.master)
	t.Cleanup(d.restore)
	return d
}

// append appends the next event of the session through the handle, with a
// chosen id (a retry after an error sends the same one again): the write is
// the first call to meet the dead node.
func (d *deadMaster) append() error {
	id := fmt.Sprintf("ev-%d", len(d.appended))
	ev := &service.Event{ID: id, InvocationID: "inv", Author: "model",
		Actions: service.EventActions{StateDelta: map[string]any{"last": id}}}
	err := d.svc.AppendEvent(wbCtx(d.t), d.sess, ev)
	if err == nil || errors.Is(err, service.ErrNotReplicated) {
		d.appended = append(d.appended, id)
	}
	return err
}

// demoteAndKill fails the master over to its replica (CLUSTER FAILOVER,
// asked again after Redis's 5 s), waits until the old master is the new
// one's replica, in sync, then kills it.
func (d *deadMaster) demoteAndKill() {
	var asked time.Time
	waitUntil(d.t, time.Minute, d.replica+" master, "+d.master+" its replica", func() bool {
		if time.Since(asked) > 6*time.Second {
			_, err := testenv.RespDo(d.replica, "CLUSTER", "FAILOVER")
			require.NoError(d.t, err)
			asked = time.Now()
		}
		return role(d.t, d.replica) == "master" && role(d.t, d.master) == "slave" && linkedTo(d.t, d.master)
	})
	d.cl.WaitHealthy(d.t, time.Minute)
	d.node(d.master).Kill(d.t)
}

// killAndTakeOver waits until the replica has everything, kills the master
// and makes the replica take over (CLUSTER FAILOVER TAKEOVER), until every
// running node names it master.
func (d *deadMaster) killAndTakeOver() {
	waitUntil(d.t, time.Minute, d.replica+" caught up with "+d.master, func() bool {
		return replOffset(d.t, d.replica, "slave_repl_offset") >= replOffset(d.t, d.master, "master_repl_offset")
	})
	d.node(d.master).Kill(d.t)
	waitUntil(d.t, time.Minute, d.replica+" master in every node's view", func() bool {
		if role(d.t, d.replica) != "master" {
			_, _ = testenv.RespDo(d.replica, "CLUSTER", "FAILOVER", "TAKEOVER")
			return false
		}
		for _, n := range d.cl.Nodes {
			if n.Running() && slotMaster(d.t, d.cl, d.wb.keys.Session(d.app, d.user, d.sid).Session, n.Addr) != d.replica {
				return false
			}
		}
		return true
	})
}

// check: the session holds the events acknowledged, in Redis and, after a
// flush, in the database.
func (d *deadMaster) check() {
	want := append([]string{}, d.appended...)
	got, err := d.svc.Get(wbCtx(d.t), &service.GetRequest{AppName: d.app, UserID: d.user, SessionID: d.sid})
	require.NoError(d.t, err)
	var ids []string
	for ev := range got.Session.Events().All() {
		ids = append(ids, ev.ID)
	}
	require.Equal(d.t, want, ids, "events of the session, read through the new master")
	require.Equal(d.t, want[len(want)-1], stateMap(got.Session)["last"])
	d.restore() // a replica for the new master: with WaitReplicas the flush's writes wait for one
	for {
		n, err := d.flusher.RunOnce(wbCtx(d.t))
		require.NoError(d.t, err)
		if n == 0 {
			break
		}
	}
	rows := readDB(d.t, d.wb.db)
	var dbIDs []string
	for _, ev := range rows.Events[sessKey{d.app, d.user, d.sid}] {
		dbIDs = append(dbIDs, ev.ID)
	}
	require.Equal(d.t, want, dbIDs, "events in the database")
}

// restore starts the dead node again (it comes back as the new master's
// replica) and waits until the cluster is healthy.
func (d *deadMaster) restore() {
	if n := d.node(d.master); !n.Running() {
		n.Start(d.t)
	}
	d.cl.WaitHealthy(d.t, time.Minute)
}

func (d *deadMaster) node(addr string) *testenv.RedisServer {
	for _, n := range d.cl.Nodes {
		if n.Addr == addr {
			return n
		}
	}
	d.t.Fatalf("no node %s", addr)
	return nil
}

// slotMaster is the node that the CLUSTER NODES of the node at ask (by
// default the first running one) names the master of key's slot.
func slotMaster(t testing.TB, cl *testenv.RedisCluster, key string, ask ...string) string {
	t.Helper()
	at := ""
	if len(ask) > 0 {
		at = ask[0]
	}
	for _, n := range cl.Nodes {
		if at == "" && n.Running() {
			at = n.Addr
		}
	}
	v, err := testenv.RespDo(at, "CLUSTER", "KEYSLOT", key)
	require.NoError(t, err)
	slot, err := strconv.Atoi(v)
	require.NoError(t, err)
	nodes, err := testenv.RespDo(at, "CLUSTER", "NODES")
	require.NoError(t, err)
	for _, line := range strings.Split(strings.TrimSpace(nodes), "\n") {
		f := strings.Fields(line)
		if len(f) < 8 || !strings.Contains(f[2], "master") || strings.Contains(f[2], "fail") {
			continue
		}
		if testenv.ServesSlot(f[8:], slot) {
			addr, _, _ := strings.Cut(f[1], "@")
			return addr
		}
	}
	return ""
}

// role is the node's role:, from INFO replication ("" when it does not answer).
func role(t testing.TB, addr string) string {
	return infoField(t, addr, "role")
}

// linkedTo: the replica at addr has its link to its master up, with no sync in progress.
func linkedTo(t testing.TB, addr string) bool {
	return infoField(t, addr, "master_link_status") == "up" && infoField(t, addr, "master_sync_in_progress") == "0"
}

func replOffset(t testing.TB, addr, field string) int64 {
	n, err := strconv.ParseInt(infoField(t, addr, field), 10, 64)
	if err != nil {
		return -1
	}
	return n
}

func infoField(t testing.TB, addr, field string) string {
	t.Helper()
	info, err := testenv.RespDo(addr, "INFO", "replication")
	if err != nil {
		return ""
	}
	return testenv.InfoField(info, field)
}
