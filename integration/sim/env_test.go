package sim

// The deployment a run drives: private servers (so that faults disturb no
// other test), several Service instances (processes of a fleet) and the
// flushers the driver starts and kills itself.

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/url"
	"runtime"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	_ "github.com/lib/pq"
	"github.com/redis/go-redis/v9"

	"github.com/adksession/adksession/cache"
	"github.com/adksession/adksession/integration/testenv"
	"github.com/adksession/adksession/service"
)

// simConfig is the Config of every Service of a run: a small cache and small
// batches, so that trimming, reads from the database and multi-batch flushes
// happen within a few dozen events.
func simConfig(redisURL, dbURL string) service.Config {
	return service.Config{
		RedisURL: redisURL, DatabaseURL: dbURL, Namespace: "sim:", Shards: 4,
		MaxCachedEvents: 6, FlushBatchSize: 7, FlushInterval: 20 * time.Millisecond,
		CacheTTL: time.Hour, TempTTL: time.Hour, DisableFlusher: true,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	}
}

// servers are a run's private Redis (standalone or cluster, with AOF) and
// Postgres, shared by the runs (seeds) of one test.
type servers struct {
	cluster  *testenv.RedisCluster
	redis    *testenv.RedisServer
	pg       *testenv.PostgresServer
	redisURL string
}

func startServers(t testing.TB, cluster bool) *servers {
	t.Helper()
	s := &servers{}
	if cluster {
		s.cluster = testenv.StartCluster(t, "--appendonly", "yes", "--appendfsync", "always")
		s.redisURL = s.cluster.URL
	} else {
		s.redis = testenv.StartRedis(t, "--appendonly", "yes", "--appendfsync", "always")
		s.redisURL = s.redis.URL
	}
	s.redisURL += "?dial_timeout=1s"
	s.pg = testenv.StartPostgres(t)
	// testenv's Postgres acknowledges commits before their WAL is written
	// (synchronous_commit = off): the crash of pg-stop -m immediate would lose
	// what it acknowledged to the flusher. Commits are durable here.
	db, err := sql.Open("postgres", s.pg.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	for _, q := range []string{"ALTER SYSTEM SET synchronous_commit = on", "SELECT pg_reload_conf()"} {
		if _, err := db.Exec(q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	return s
}

// env is one run's deployment: a namespace and a database of its own, and
// sh.Services services (processes).
type env struct {
	*servers
	t      testing.TB
	cfg    service.Config
	svcs   []*service.Service
	rdb    redis.UniversalClient
	db     *sql.DB
	keys   cache.Keys
	dbName string

	mu       sync.Mutex
	flushers []*service.Flusher // running in the background (several clients)

	elected map[string]time.Time // cluster node -> when it was last asked to fail over (test goroutine)
}

// newEnv opens a run's deployment on srv; close it with close.
func newEnv(t testing.TB, srv *servers, sh shape, seed int64) *env {
	t.Helper()
	e := &env{servers: srv, t: t}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	e.dbName = fmt.Sprintf("sim_%d", uint64(seed)%1_000_000_007)
	dbURL, err := srv.createDB(ctx, e.dbName)
	if err != nil {
		t.Fatalf("create database: %v", err)
	}
	if err := service.Migrate(ctx, dbURL); err != nil {
		t.Fatalf("migrate: %v", err)
	}
	e.cfg = simConfig(srv.redisURL, dbURL)
	e.cfg.Namespace = fmt.Sprintf("sim%d:", uint64(seed)%1_000_000_007)
	if e.keys, err = cache.NewKeys(e.cfg.Namespace, e.cfg.Shards); err != nil {
		t.Fatal(err)
	}
	if e.rdb, err = cache.NewClient(srv.redisURL); err != nil {
		t.Fatal(err)
	}
	if e.db, err = sql.Open("postgres", dbURL); err != nil {
		t.Fatal(err)
	}
	for i := range sh.Services {
		cfg := e.cfg
		cfg.ConcurrentAppends = e.concurrent(i)
		svc, err := service.Open(ctx, cfg)
		if err != nil {
			t.Fatalf("open service %d: %v", i, err)
		}
		e.svcs = append(e.svcs, svc)
	}
	return e
}

func (e *env) close() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	e.stopFlushers(ctx)
	for _, s := range e.svcs {
		s.Close(ctx)
	}
	e.rdb.Close()
	e.db.Close()
	if err := e.servers.dropDB(ctx, e.dbName); err != nil {
		e.t.Logf("drop database %s: %v", e.dbName, err)
	}
}

// createDB creates a database on the private Postgres and returns its URL.
func (s *servers) createDB(ctx context.Context, name string) (string, error) {
	admin, err := sql.Open("postgres", s.pg.URL)
	if err != nil {
		return "", err
	}
	defer admin.Close()
	if _, err := admin.ExecContext(ctx, "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)"); err != nil {
		return "", err
	}
	if _, err := admin.ExecContext(ctx, "CREATE DATABASE "+name); err != nil {
		return "", err
	}
	u, err := url.Parse(s.pg.URL)
	if err != nil {
		return "", err
	}
	u.Path = "/" + name
	return u.String(), nil
}

func (s *servers) dropDB(ctx context.Context, name string) error {
	admin, err := sql.Open("postgres", s.pg.URL)
	if err != nil {
		return err
	}
	defer admin.Close()
	_, err = admin.ExecContext(ctx, "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)")
	return err
}

// concurrent tells whether service i applies appends through stale handles.
func (e *env) concurrent(i int) bool { return i%2 == 1 }

// startFlushers runs n flushers in the background (of services 0, 1, ...).
func (e *env) startFlushers(n int) {
	e.mu.Lock()
	defer e.mu.Unlock()
	for i := range n {
		f := e.svcs[i%len(e.svcs)].NewFlusher(e.cfg.Logger)
		f.Start(context.Background())
		e.flushers = append(e.flushers, f)
	}
}

func (e *env) stopFlushers(ctx context.Context) {
	e.mu.Lock()
	fs := e.flushers
	e.flushers = nil
	e.mu.Unlock()
	for _, f := range fs {
		f.Stop(ctx)
	}
}

// flush returns once everything acknowledged is in the database. Without
// background flushers it runs one for the time of the flush.
func (e *env) flush(ctx context.Context) error {
	e.mu.Lock()
	running := len(e.flushers) > 0
	e.mu.Unlock()
	if !running {
		f := e.svcs[0].NewFlusher(e.cfg.Logger)
		f.Start(ctx)
		defer f.Stop(ctx)
	}
	return e.svcs[0].Flush(ctx)
}

// killFlusher runs a flusher (or takes a background one) and stops it after d
// with a context that ends at once: it dies in the middle of whatever batch it
// is writing. A background flusher is replaced by a new one.
func (e *env) killFlusher(d time.Duration) {
	e.mu.Lock()
	var f *service.Flusher
	if len(e.flushers) > 0 {
		f = e.flushers[0]
		e.flushers = e.flushers[1:]
	}
	e.mu.Unlock()
	if f == nil {
		f = e.svcs[0].NewFlusher(e.cfg.Logger)
		f.Start(context.Background()) // its loop begins with a pass
		// The flusher's time to run: a duration drawn from the seed, not a wait for a result.
		time.Sleep(d)
	} else {
		time.Sleep(d)
		defer e.startFlushers(1)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Millisecond)
	defer cancel()
	f.Stop(ctx)
}

// masters returns the addresses of the masters (the one server when standalone).
func (e *env) masters() []string {
	if e.cluster == nil {
		return []string{e.redis.Addr}
	}
	var out []string
	for _, n := range e.cluster.Nodes {
		if !n.Running() {
			continue
		}
		// A master that holds no slot (one demoted a moment ago that has not
		// heard of it yet) is no shard's master: nothing replicates it.
		if me, err := clusterSelf(n.Addr); err == nil && me.isMaster() && me.slots > 0 {
			out = append(out, n.Addr)
		}
	}
	sort.Strings(out)
	return out
}

// keysWithTTL lists the namespace's keys that carry a TTL (those a
// volatile-* policy may evict), sorted.
func (e *env) keysWithTTL(ctx context.Context) ([]string, error) {
	var all []string
	var mu sync.Mutex
	scan := func(ctx context.Context, c *redis.Client) error {
		var keys []string
		iter := c.Scan(ctx, 0, e.cfg.Namespace+"*", 500).Iterator()
		for iter.Next(ctx) {
			keys = append(keys, iter.Val())
		}
		if err := iter.Err(); err != nil {
			return err
		}
		pipe := c.Pipeline()
		ttls := make([]*redis.DurationCmd, len(keys))
		for i, k := range keys {
			ttls[i] = pipe.PTTL(ctx, k)
		}
		if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
			return err
		}
		mu.Lock()
		defer mu.Unlock()
		for i, k := range keys {
			if ttls[i].Val() > 0 {
				all = append(all, k)
			}
		}
		return nil
	}
	var err error
	switch c := e.rdb.(type) {
	case *redis.ClusterClient:
		err = c.ForEachMaster(ctx, scan)
	case *redis.Client:
		err = scan(ctx, c)
	default:
		err = fmt.Errorf("unknown client %T", e.rdb)
	}
	sort.Strings(all)
	return slices.Compact(all), err
}

// evictScript deletes a key only while it carries a TTL, atomically: what
// volatile-lru may do to it at any moment.
var evictScript = redis.NewScript(`if redis.call('PTTL', KEYS[1]) > 0 then return redis.call('DEL', KEYS[1]) end return 0`)

// evict runs evictScript on key.
func (e *env) evict(ctx context.Context, key string) (ok bool, err error) {
	err = faultRetry(ctx, func() error {
		n, err := evictScript.Run(ctx, e.rdb, []string{key}).Int()
		ok = n == 1
		return err
	})
	return ok, err
}

// faultRetry runs a step of a fault until it succeeds, for up to 10 s: a
// cluster that has just failed over may answer MOVED (a node that was a
// master a moment ago) for longer than go-redis follows redirects.
func faultRetry(ctx context.Context, f func() error) error {
	deadline := time.Now().Add(10 * time.Second)
	for {
		err := f()
		if err == nil || time.Now().After(deadline) || ctx.Err() != nil {
			return err
		}
		time.Sleep(100 * time.Millisecond) // the cluster's next slot map
	}
}

// flushAll empties every master (FLUSHALL).
func (e *env) flushAll(ctx context.Context) error {
	switch c := e.rdb.(type) {
	case *redis.ClusterClient:
		return c.ForEachMaster(ctx, func(ctx context.Context, n *redis.Client) error { return n.FlushAll(ctx).Err() })
	default:
		return e.rdb.FlushAll(ctx).Err()
	}
}

// waitRedis waits until Redis answers every service (after a restart or
// failover, go-redis's dial breaker may refuse for a second more).
func (e *env) waitRedis(timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		err := e.rdb.Ping(ctx).Err()
		for _, s := range e.svcs {
			if err == nil {
				_, err = s.Backlog(ctx) // Redis only: each service's own pool answers again
			}
			if err == nil {
				err = dialBurst(ctx, s.Redis())
			}
		}
		cancel()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("redis not answering after %v: %w", timeout, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// dialBurst sends twice go-redis's default pool size of PINGs at once
// through rdb, so that its pool dials new connections: go-redis counts dial
// failures across outages and, once they reach the pool size, fails every
// new dial at once with the last dial error until a probe, once a second,
// gets through (internal/pool, dialErrorsNum). A command that finds an idle
// connection does not see that breaker; a read that needs a new connection
// does (standalone concurrent seed 741671279992: "connection refused" at
// checkpoint 1, 0.26 s after Redis was back and answering).
func dialBurst(ctx context.Context, rdb redis.UniversalClient) error {
	n := 2 * 10 * runtime.GOMAXPROCS(0)
	errs := make(chan error, n)
	for range n {
		go func() { errs <- rdb.Ping(ctx).Err() }()
	}
	var first error
	for range n {
		if err := <-errs; err != nil && first == nil {
			first = err
		}
	}
	return first
}

// failover makes a replica of master number pick (of the sorted masters) take
// over (failoverOf); it reports how long the replica took to be ready.
func (e *env) failover(pick int) (time.Duration, error) {
	masters := e.masters()
	if len(masters) == 0 {
		return 0, errors.New("no master")
	}
	_, waited, err := e.failoverOf(masters[pick%len(masters)])
	return waited, err
}

// electionVotes: Redis 7.0 counts the votes of a node's last election for
// twice cluster-node-timeout (2000 ms here). A manual failover asked of the
// node within that time "wins" at once on those votes, without a new epoch:
// the node serves as master for a moment, the others turn it back into a
// replica, and it resynchronises from scratch, dropping the writes it took
// meanwhile (its old master, paused for the failover, waits out its 5 s).
// Seen by TestFailoverSameShardAgain; the harness leaves more than that time
// between two elections of one node (Redis then starts the new one 8 s after
// the last).
const electionVotes = 4*time.Second + 500*time.Millisecond

// failoverOf makes a replica of the master at addr take over with CLUSTER
// FAILOVER, once one is ready to (readyReplica) and its last election is
// over (electionVotes), and waits until the cluster is healthy and the old
// master is the new one's ready replica. It returns the new master and how
// long it waited before asking.
func (e *env) failoverOf(master string) (string, time.Duration, error) {
	start := time.Now()
	deadline := start.Add(time.Minute)
	for {
		replica, err := e.readyReplica(master, deadline)
		if err != nil {
			return "", time.Since(start), err
		}
		if e.elected == nil {
			e.elected = map[string]time.Time{}
		}
		time.Sleep(time.Until(e.elected[replica].Add(electionVotes)))
		waited := time.Since(start)
		e.elected[replica] = time.Now()
		if _, err := testenv.RespDo(replica, "CLUSTER", "FAILOVER"); err != nil {
			return "", waited, fmt.Errorf("CLUSTER FAILOVER on %s: %w", replica, err)
		}
		// Taken over once the replica is a master whose replica (the old
		// master) is ready: a node that answers role:master for a moment may
		// be turned back into a replica. Asked again after Redis's 5 s of a
		// manual failover.
		taken := false
		for asked := time.Now(); !taken && time.Since(asked) < 6*time.Second; time.Sleep(50 * time.Millisecond) {
			if me, err := clusterSelf(replica); err != nil || !me.isMaster() || me.slots == 0 {
				continue
			}
			r, err := e.replicaOf(replica)
			taken = err == nil && inSync(replica, r) == nil
		}
		e.elected[replica] = time.Now() // its election, if any, is over by now
		if taken {
			e.cluster.WaitHealthy(e.t, time.Until(deadline))
			return replica, waited, nil
		}
		if time.Now().After(deadline) {
			return "", waited, fmt.Errorf("replica %s of %s did not take over", replica, master)
		}
	}
}

// readyReplica waits until deadline for a replica of the master at addr that
// can take over at once, and returns it: it calls itself the master's replica
// and the master calls it its own (each one's CLUSTER NODES: a master ignores
// a manual failover asked by a node it does not know as its replica, and the
// failover times out after 5 s), its link to the master is up with no sync in
// progress, and its offset has reached the master's, read just before. A
// master that took over a moment ago gets its replica (the old master) only
// once that one has heard of the failover and synchronised, and the master
// has heard of it in turn; a failover asked before then found no replica
// (cluster concurrent seeds 213296038499 and 1095823811492).
func (e *env) readyReplica(addr string, deadline time.Time) (string, error) {
	for {
		replica, err := e.replicaOf(addr)
		if err == nil {
			if err = inSync(addr, replica); err == nil {
				return replica, nil
			}
		}
		if time.Now().After(deadline) {
			return "", fmt.Errorf("no replica of %s ready to take over: %w", addr, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// inSync tells why the node at replica cannot take over from the master at
// addr without losing writes (nil: it can).
func inSync(addr, replica string) error {
	m, err := testenv.RespDo(addr, "INFO", "replication")
	if err != nil {
		return err
	}
	want, err := strconv.ParseInt(testenv.InfoField(m, "master_repl_offset"), 10, 64)
	if err != nil {
		return fmt.Errorf("master %s: master_repl_offset: %w", addr, err)
	}
	r, err := testenv.RespDo(replica, "INFO", "replication")
	if err != nil {
		return err
	}
	host, port, _ := net.SplitHostPort(addr)
	got, _ := strconv.ParseInt(testenv.InfoField(r, "slave_repl_offset"), 10, 64)
	switch {
	case testenv.InfoField(r, "role") != "slave" || testenv.InfoField(r, "master_host") != host || testenv.InfoField(r, "master_port") != port:
		return fmt.Errorf("replica %s: role %s of %s:%s", replica, testenv.InfoField(r, "role"), testenv.InfoField(r, "master_host"), testenv.InfoField(r, "master_port"))
	case testenv.InfoField(r, "master_link_status") != "up" || testenv.InfoField(r, "master_sync_in_progress") != "0":
		return fmt.Errorf("replica %s: link %s, sync in progress %s", replica, testenv.InfoField(r, "master_link_status"), testenv.InfoField(r, "master_sync_in_progress"))
	case got < want:
		return fmt.Errorf("replica %s: offset %d, master's %d", replica, got, want)
	}
	return nil
}

// clusterNode is a line of CLUSTER NODES.
type clusterNode struct {
	id, flags, master string
	slots             int // slot ranges it serves
}

func (n clusterNode) isMaster() bool  { return strings.Contains(n.flags, "master") }
func (n clusterNode) isReplica() bool { return strings.Contains(n.flags, "slave") }

// clusterNodes is the view of the node at addr: itself, and every node it
// knows by id.
func clusterNodes(addr string) (self clusterNode, byID map[string]clusterNode, err error) {
	nodes, err := testenv.RespDo(addr, "CLUSTER", "NODES")
	if err != nil {
		return self, nil, err
	}
	byID = map[string]clusterNode{}
	found := false
	for _, line := range strings.Split(strings.TrimSpace(nodes), "\n") {
		f := strings.Fields(line)
		if len(f) < 8 {
			continue
		}
		n := clusterNode{id: f[0], flags: f[2], master: f[3], slots: len(f) - 8}
		byID[n.id] = n
		if strings.Contains(n.flags, "myself") {
			self, found = n, true
		}
	}
	if !found {
		return self, nil, fmt.Errorf("no myself line in CLUSTER NODES of %s", addr)
	}
	return self, byID, nil
}

// clusterSelf is the node at addr as it sees itself.
func clusterSelf(addr string) (clusterNode, error) {
	self, _, err := clusterNodes(addr)
	return self, err
}

// replicaOf returns a replica of the master at addr: a node that calls itself
// the master's replica and that every node calls so (a master ignores a
// manual failover asked by a node it does not know as its replica, and votes
// against a node it still takes for a master).
func (e *env) replicaOf(addr string) (string, error) {
	m, err := clusterSelf(addr)
	if err != nil {
		return "", err
	}
	views := map[string]map[string]clusterNode{} // running node -> its view
	for _, n := range e.cluster.Nodes {
		if n.Running() {
			if _, byID, err := clusterNodes(n.Addr); err == nil {
				views[n.Addr] = byID
			}
		}
	}
	var seen []string // each node's own view and the others', for the error
	for _, n := range e.cluster.Nodes {
		if !n.Running() {
			seen = append(seen, n.Addr+" not running")
			continue
		}
		me, err := clusterSelf(n.Addr)
		agreed := err == nil && me.isReplica() && me.master == m.id
		var others []string
		for a, byID := range views {
			if o := byID[me.id]; !o.isReplica() || o.master != m.id {
				agreed = false
				others = append(others, fmt.Sprintf("%s says %s master %s", a, o.flags, o.master))
			}
		}
		if agreed && len(views) == len(e.cluster.Nodes) {
			return n.Addr, nil
		}
		seen = append(seen, fmt.Sprintf("%s %s %s master %s slots %d (%s) %v",
			n.Addr, me.id, me.flags, me.master, me.slots, strings.Join(others, ", "), err))
	}
	return "", fmt.Errorf("no replica of %s (%s); the nodes: %s", addr, m.id, strings.Join(seen, "; "))
}
