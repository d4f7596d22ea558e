package integration

// The crash harness (docs/design.md, "Redis faults"): the real `adksession
// serve` binary, built once by the test, killed with SIGKILL at random
// moments under an HTTP append load and restarted on the same address, then
// drained with SIGTERM. Every client retries each event by its id until it
// is acknowledged, and a ledger records every acknowledgement; at the end
// the database's rows are compared with the ledger event by event: every
// acknowledged event once, in acknowledgement order, with its state. In the
// modes where Redis is killed too and restarts from an RDB snapshot, an
// event acknowledged before a Redis restart and not yet flushed may be
// missing (counted and reported); nothing else may.
//
// Longer runs: go test -run TestCrashServe ./integration -crash.kills=40
// -crash.duration=10m (through integration/testenv.sh); -crash.seed=N
// replays a schedule, -crash.modes=RDBRedisKilled runs one mode.

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/adksession/adksession/integration/testenv"
	"github.com/adksession/adksession/service"
)

var (
	crashKills    = flag.Int("crash.kills", 10, "SIGKILLs of serve (or of Redis) per mode")
	crashDuration = flag.Duration("crash.duration", 45*time.Second, "longest the kill phase of a mode runs")
	crashSeed     = flag.Uint64("crash.seed", 0, "seed of the kill schedule (0: a random one; every run prints its seed)")
	crashClients  = flag.Int("crash.clients", 8, "HTTP clients, each appending to sessions of its own")
	crashModes    = flag.String("crash.modes", "", "comma-separated modes to run (default all: AOF, AOFRedisKilled, RDB, RDBRedisKilled)")
	crashVerbose  = flag.Bool("crash.verbose", false, "log what the database holds of every session before each Redis kill")
)

const (
	crashApp         = "crash"
	crashSessions    = 3           // per client
	crashUsers       = 4           // sessions of different clients share users
	crashLeaseTTL    = time.Second // --flush-lease-ttl: a killed serve's shards pass on quickly
	crashLiveness    = time.Minute // longest a client may go without an acknowledgement while serve runs
	crashRetryPace   = 20 * time.Millisecond
	crashAppendPace  = 5 * time.Millisecond
	crashSaveEvery   = time.Second // BGSAVE period of the RDB modes
	crashStopTimeout = 2 * time.Minute
)

// crashMode is one persistence setup of the harness's private Redis.
type crashMode struct {
	name      string
	redisArgs []string
	bgsave    bool // the harness BGSAVEs every crashSaveEvery
	killRedis bool // Redis is SIGKILLed now and then too, and restarted from its files
	// lossy: a Redis restart loses what it acknowledged after its last
	// snapshot; such events may be missing when not flushed before.
	lossy bool
}

var crashModeList = []crashMode{
	{name: "AOF", redisArgs: []string{"--appendonly", "yes", "--appendfsync", "always"}},
	{name: "AOFRedisKilled", redisArgs: []string{"--appendonly", "yes", "--appendfsync", "always"}, killRedis: true},
	{name: "RDB", redisArgs: []string{"--appendonly", "no"}, bgsave: true},
	{name: "RDBRedisKilled", redisArgs: []string{"--appendonly", "no"}, bgsave: true, killRedis: true, lossy: true},
}

// TestCrashServe runs the crash harness in every mode (-crash.modes).
func TestCrashServe(t *testing.T) {
	t.Parallel()
	testenv.DatabaseURL(t) // skips (or fails) without the harness's servers
	testenv.RedisServerPath(t)
	bin := buildServe(t)
	seed := *crashSeed
	if seed == 0 {
		seed = rand.Uint64()
	}
	t.Logf("crash harness seed %d (-crash.seed=%d replays the schedule), %d kills or %v per mode, %d clients",
		seed, seed, *crashKills, *crashDuration, *crashClients)
	var only []string
	if *crashModes != "" {
		only = strings.Split(*crashModes, ",")
	}
	for i, m := range crashModeList {
		if only != nil && !slices.Contains(only, m.name) {
			continue
		}
		t.Run(m.name, func(t *testing.T) { runCrash(t, bin, m, seed+uint64(i)) })
	}
}

// buildServe builds ./cmd/adksession into a temp dir, with -race when the
// test binary has it.
func buildServe(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "adksession")
	args := []string{"build", "-o", bin}
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, s := range bi.Settings {
			if s.Key == "-race" && s.Value == "true" {
				args = append(args, "-race")
			}
		}
	}
	goBin, err := exec.LookPath("go")
	require.NoError(t, err, "the go command, to build adksession")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, goBin, append(args, "./cmd/adksession")...)
	cmd.Dir = ".." // the module root: the test runs in integration/
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "go %s:\n%s", strings.Join(args, " "), out)
	return bin
}

// ---------------------------------------------------------------------------
// The serve process.

// serveProc is `adksession serve` run from bin, restarted on the same
// address with the same flags after every kill.
type serveProc struct {
	t       *testing.T
	bin     string
	args    []string
	base    string // http://127.0.0.1:PORT
	logPath string

	cmd     *exec.Cmd
	done    chan struct{} // closed when cmd has exited
	exitErr error         // cmd.Wait's, once done is closed
	started time.Time
}

func newServe(t *testing.T, bin, redisURL, dbURL string) *serveProc {
	port := freeLoopbackPort(t)
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	p := &serveProc{t: t, bin: bin, base: "http://" + addr, logPath: filepath.Join(testenv.TempDir(t), "serve.log"),
		args: []string{"serve", "--addr", addr, "--redis", redisURL, "--database", dbURL, "--migrate",
			"--flush-lease-ttl", crashLeaseTTL.String(), "--drain-timeout", "60s"}}
	t.Cleanup(func() {
		if p.running() {
			p.signal(syscall.SIGKILL)
		}
	})
	return p
}

// freeLoopbackPort is a port nobody listens on, below Linux's ephemeral
// range (so no client connection takes it between two runs of serve).
func freeLoopbackPort(t *testing.T) int {
	for range 1000 {
		p := 22000 + rand.IntN(10000)
		if l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p))); err == nil {
			l.Close()
			return p
		}
	}
	t.Fatal("no free port on 127.0.0.1")
	return 0
}

// start runs serve and waits until it answers /healthz (it serves HTTP
// once its service is open).
func (p *serveProc) start() {
	t := p.t
	t.Helper()
	logf, err := os.OpenFile(p.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	require.NoError(t, err)
	defer logf.Close()
	fmt.Fprintf(logf, "---- start %s\n", time.Now().Format(time.RFC3339Nano))
	cmd := exec.Command(p.bin, p.args...)
	cmd.Env = slices.DeleteFunc(os.Environ(), func(kv string) bool {
		name, _, _ := strings.Cut(kv, "=")
		return slices.Contains([]string{"AUTH_TOKEN", "ADDR", "ADKSESSION_NAMESPACE", "ALLOW_ORIGINS", "ALLOW_HOSTS"}, name)
	})
	cmd.Stdout, cmd.Stderr = logf, logf
	require.NoError(t, cmd.Start())
	done := make(chan struct{})
	go func() { p.exitErr = cmd.Wait(); close(done) }()
	p.cmd, p.done, p.started = cmd, done, time.Now()
	hc := &http.Client{Timeout: 2 * time.Second}
	deadline := time.Now().Add(time.Minute)
	for {
		select {
		case <-done:
			t.Fatalf("serve exited during startup (%v):\n%s", p.exitErr, p.logTail(30))
		default:
		}
		if resp, err := hc.Get(p.base + "/healthz"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
		}
		require.True(t, time.Now().Before(deadline), "serve did not answer /healthz within a minute:\n%s", p.logTail(30))
		time.Sleep(10 * time.Millisecond)
	}
}

func (p *serveProc) running() bool {
	if p.done == nil {
		return false
	}
	select {
	case <-p.done:
		return false
	default:
		return true
	}
}

// signal sends sig and waits for serve to exit.
func (p *serveProc) signal(sig syscall.Signal) error {
	p.cmd.Process.Signal(sig)
	select {
	case <-p.done:
	case <-time.After(crashStopTimeout):
		p.cmd.Process.Kill()
		<-p.done
		return fmt.Errorf("serve did not exit within %v of %v", crashStopTimeout, sig)
	}
	return p.exitErr
}

func (p *serveProc) logTail(n int) string {
	b, _ := os.ReadFile(p.logPath)
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// ---------------------------------------------------------------------------
// The ledger.

// crashAck is one acknowledged event: its id, its number in its session,
// the Redis epoch (restarts of Redis completed) when the attempt that was
// acknowledged was sent, and the number of BGSAVEs sent when the
// acknowledgement had come (every later snapshot holds the event).
type crashAck struct {
	id    string
	j     int
	epoch int64
	saves int64
}

type crashLedger struct {
	mu      sync.Mutex
	acked   map[sessKey][]crashAck // per session, in acknowledgement order
	total   atomic.Int64
	retried atomic.Int64 // attempts that failed (no answer, 5xx) and were sent again
	slowest atomic.Int64 // ns from the first attempt of an event to its acknowledgement
	failed  sync.Map     // failure kind ("connection", "503", ...) -> *atomic.Int64
}

func (l *crashLedger) ack(k sessKey, a crashAck, took time.Duration) {
	l.mu.Lock()
	l.acked[k] = append(l.acked[k], a)
	l.mu.Unlock()
	l.total.Add(1)
	for old := l.slowest.Load(); int64(took) > old && !l.slowest.CompareAndSwap(old, int64(took)); old = l.slowest.Load() {
	}
}

func (l *crashLedger) fail(kind string) {
	l.retried.Add(1)
	n, _ := l.failed.LoadOrStore(kind, new(atomic.Int64))
	n.(*atomic.Int64).Add(1)
}

func (l *crashLedger) failures() string {
	var parts []string
	l.failed.Range(func(k, v any) bool {
		parts = append(parts, fmt.Sprintf("%s %d", k, v.(*atomic.Int64).Load()))
		return true
	})
	slices.Sort(parts)
	return strings.Join(parts, ", ")
}

// ---------------------------------------------------------------------------
// The harness.

type crashHarness struct {
	t     *testing.T
	mode  crashMode
	redis *testenv.RedisServer
	serve *serveProc
	db    *sql.DB
	l     *crashLedger
	http  *http.Client

	epoch      atomic.Int64 // Redis restarts completed
	progress   []atomic.Int64
	saveMu     sync.Mutex                  // held by a BGSAVE until it has finished, and by a Redis kill until Redis is back
	saves      atomic.Int64                // BGSAVEs finished
	saveGen    atomic.Int64                // BGSAVEs sent (counted before each is sent)
	restored   []int64                     // per Redis restart, the BGSAVE it came back from (0: none)
	everInDB   map[sessKey]map[string]bool // event ids the database held before some Redis kill
	serveKills int
	redisKills int
	schedule   []byte // the faults in order: s (serve), r (Redis), b (both)
}

// crashClient is one client's sessions.
type crashClient struct {
	sessions []sessKey
}

func runCrash(t *testing.T, bin string, mode crashMode, seed uint64) {
	began := time.Now()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	dbURL := testenv.FreshDatabase(t)
	db, err := sql.Open("postgres", dbURL)
	require.NoError(t, err)
	t.Cleanup(func() { db.Close() })
	h := &crashHarness{t: t, mode: mode, redis: testenv.StartRedis(t, mode.redisArgs...), db: db,
		l:        &crashLedger{acked: map[sessKey][]crashAck{}},
		http:     &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: *crashClients}},
		progress: make([]atomic.Int64, *crashClients), everInDB: map[sessKey]map[string]bool{}}
	h.serve = newServe(t, bin, h.redis.URL, dbURL)
	h.serve.start()

	clients := make([]crashClient, *crashClients)
	for c := range clients {
		for i := range crashSessions {
			k := sessKey{crashApp, fmt.Sprint("u", (c+i)%crashUsers), fmt.Sprintf("c%d-s%d", c, i)}
			h.create(k)
			clients[c].sessions = append(clients[c].sessions, k)
		}
	}
	// Every session is in the database before the first fault, so that a
	// Redis restarted from a snapshot taken before it was created finds it
	// there (a session lost with Redis before its flush is not this
	// harness's subject).
	want := *crashClients * crashSessions
	waitUntil(t, time.Minute, "every session in the database", func() bool {
		var n int
		require.NoError(t, db.QueryRow(`SELECT count(*) FROM sessions`).Scan(&n))
		return n == want
	})
	stopSaver := func() {}
	if mode.bgsave {
		stopSaver = h.startSaver(ctx)
	}

	stop := make(chan struct{})
	var wg sync.WaitGroup
	for c := range clients {
		wg.Go(func() { h.runClient(ctx, c, clients[c], stop) })
	}

	// The kill schedule: after every restart, once every client has been
	// acknowledged again, a random pause (the random moment of the next
	// fault: a schedule, not a wait for work), then the fault.
	rng := rand.New(rand.NewPCG(seed, 0xc4a54))
	for k := 0; k < *crashKills && time.Since(began) < *crashDuration && !t.Failed(); k++ {
		h.waitProgress()
		time.Sleep(time.Duration(50+rng.IntN(1200)) * time.Millisecond)
		action := 0 // serve only
		if mode.killRedis {
			action = rng.IntN(4) // 0, 1: serve; 2: Redis; 3: both
		}
		h.schedule = append(h.schedule, "ssrb"[action])
		switch action {
		case 2:
			h.killRedis()
		case 3:
			h.serve.signal(syscall.SIGKILL)
			h.serveKills++
			h.killRedis()
			h.serve.start()
		default:
			h.serve.signal(syscall.SIGKILL)
			h.serveKills++
			h.serve.start()
		}
	}
	h.waitProgress()
	// The last serve holds every shard's lease once the killed one's have
	// expired, so that its drain reaches every shard.
	waitUntil(t, time.Minute, "the killed serve's leases to expire", func() bool {
		return time.Since(h.serve.started) > crashLeaseTTL+500*time.Millisecond
	})
	close(stop)
	wg.Wait()
	stopSaver()
	require.False(t, t.Failed(), "the load failed")
	termErr := h.serve.signal(syscall.SIGTERM)
	require.NoError(t, termErr, "serve's drain on SIGTERM exits 0:\n%s", h.serve.logTail(30))
	logText, err := os.ReadFile(h.serve.logPath)
	require.NoError(t, err)
	require.NotContains(t, string(logText), "WARNING: DATA RACE", "serve's log")

	// The drain left nothing in the change log, and nothing was dead-lettered.
	svc, err := service.Open(wbCtx(t), service.Config{RedisURL: h.redis.URL, DatabaseURL: dbURL, DisableFlusher: true})
	require.NoError(t, err)
	backlog, err := svc.Backlog(wbCtx(t))
	require.NoError(t, err)
	require.NoError(t, svc.Close(wbCtx(t)))
	require.Zero(t, backlog.Entries, "change-log entries left after serve's drain")
	require.Zero(t, backlog.Dead, "dead letters")

	r := h.check()
	t.Logf("%s (seed %d): %d serve kills, %d Redis kills (%d BGSAVEs); %d appends acknowledged (%d attempts retried: %s; "+
		"slowest event %v), %d in Postgres; missing %d (%d lost with Redis before flush, %d otherwise), duplicated %d, "+
		"reordered %d, never acknowledged %d; state mismatches %d (%d keys of stored events lost, %d keys of events not stored); "+
		"%d state keys of events lost with Redis (allowed); took %v; faults %s",
		mode.name, seed, h.serveKills, h.redisKills, h.saves.Load(), h.l.total.Load(), h.l.retried.Load(), h.l.failures(),
		time.Duration(h.l.slowest.Load()).Round(time.Millisecond), r.stored, r.lostWithRedis+r.missing, r.lostWithRedis,
		r.missing, r.duplicated, r.reordered, r.unknown, r.stateMismatches, r.stateDropped, r.stateOfMissing, r.stateOfLost,
		time.Since(began).Round(time.Second), h.schedule)
	for _, p := range r.problems[:min(len(r.problems), 20)] {
		t.Error(p)
	}
	if len(r.problems) > 20 {
		t.Errorf("... and %d more", len(r.problems)-20)
	}
	require.Positive(t, h.serveKills, "serve was killed")
	require.Positive(t, h.l.retried.Load(), "appends failed while serve was down")
}

// post sends a JSON body and returns the status and body of the answer.
func (h *crashHarness) post(ctx context.Context, path string, body []byte) (int, []byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, h.serve.base+path, bytes.NewReader(body))
	if err != nil {
		return 0, nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := h.http.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, b, err
}

func sessionPath(k sessKey) string {
	return "/apps/" + url.PathEscape(k.app) + "/users/" + url.PathEscape(k.user) + "/sessions/" + url.PathEscape(k.sid)
}

func (h *crashHarness) create(k sessKey) {
	body, err := json.Marshal(map[string]any{"init": k.sid})
	require.NoError(h.t, err)
	code, resp, err := h.post(wbCtx(h.t), sessionPath(k), body)
	require.NoError(h.t, err)
	require.Equal(h.t, http.StatusOK, code, "create %v: %s", k, resp)
}

// crashEvent is event j of session k: a key every event of the session
// overwrites (in the session and in its user), so the final state shows
// their order, and a key of its own, so it shows every event applied.
func crashEvent(k sessKey, id string, j int) []byte {
	b, _ := json.Marshal(map[string]any{
		"id": id, "invocationId": "inv-" + k.sid, "author": "model",
		"content": map[string]any{"role": "model", "parts": []any{map[string]any{"text": "event " + id}}},
		"actions": map[string]any{"stateDelta": map[string]any{
			"last": id, "e:" + id: j, "user:last-" + k.sid: id,
		}},
	})
	return b
}

// runClient appends to the client's sessions in turn until stop, each event
// sent again with its id until acknowledged (no answer or 5xx: serve or
// Redis is down; any other answer is a failure of the test).
func (h *crashHarness) runClient(ctx context.Context, c int, cl crashClient, stop <-chan struct{}) {
	next := make([]int, len(cl.sessions))
	for i := 0; ; i++ {
		select {
		case <-stop:
			return
		case <-ctx.Done():
			return
		case <-time.After(crashAppendPace):
		}
		s := i % len(cl.sessions)
		k, j := cl.sessions[s], next[s]
		next[s]++
		id := fmt.Sprintf("%s-e%d", k.sid, j)
		body := crashEvent(k, id, j)
		first := time.Now()
		for {
			epoch := h.epoch.Load()
			code, resp, err := h.post(ctx, sessionPath(k)+"/events", body)
			if err == nil && code == http.StatusOK {
				var got struct{ ID string }
				if err := json.Unmarshal(resp, &got); err != nil || got.ID != id {
					h.t.Errorf("append %s: 200 with %s", id, resp)
					return
				}
				h.l.ack(k, crashAck{id: id, j: j, epoch: epoch, saves: h.saveGen.Load()}, time.Since(first))
				h.progress[c].Add(1)
				break
			}
			if ctx.Err() != nil {
				return
			}
			switch {
			case err != nil:
				h.l.fail("no answer")
			case code >= 500:
				h.l.fail(strconv.Itoa(code))
			default:
				h.t.Errorf("append %s: %d %s", id, code, resp)
				return
			}
			if time.Since(first) > 3*crashLiveness {
				h.t.Errorf("append %s: not acknowledged for %v; last answer %d %s %v", id, time.Since(first), code, resp, err)
				return
			}
			select {
			case <-ctx.Done():
				return
			case <-time.After(crashRetryPace): // the retry's pace, not a wait for a condition
			}
		}
	}
}

// waitProgress waits until every client has been acknowledged since it was
// called: serve (and Redis) are back and take appends.
func (h *crashHarness) waitProgress() {
	h.t.Helper()
	at := make([]int64, len(h.progress))
	for c := range h.progress {
		at[c] = h.progress[c].Load()
	}
	waitUntil(h.t, crashLiveness, "every client acknowledged after a restart", func() bool {
		if h.t.Failed() {
			return true
		}
		for c := range h.progress {
			if h.progress[c].Load() <= at[c] {
				return false
			}
		}
		return true
	})
}

// startSaver BGSAVEs every crashSaveEvery, each time waiting until the
// snapshot is written, and returns the function that stops it. A Redis kill
// waits for the snapshot in progress: a BGSAVE child outlives a killed
// redis-server and would put its snapshot in place under the restarted one.
func (h *crashHarness) startSaver(ctx context.Context) func() {
	h.bgsave() // one snapshot before the first fault
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		tick := time.NewTicker(crashSaveEvery)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-ctx.Done():
				return
			case <-tick.C:
				h.bgsave()
			}
		}
	}()
	return func() { close(stop); <-done }
}

func (h *crashHarness) bgsave() {
	h.saveMu.Lock()
	defer h.saveMu.Unlock()
	h.saveGen.Add(1)
	if _, err := testenv.RespDo(h.redis.Addr, "BGSAVE"); err != nil {
		h.t.Logf("BGSAVE: %v", err)
		return
	}
	deadline := time.Now().Add(time.Minute)
	for time.Now().Before(deadline) {
		info, err := testenv.RespDo(h.redis.Addr, "INFO", "persistence")
		if err == nil && testenv.InfoField(info, "rdb_bgsave_in_progress") == "0" {
			if testenv.InfoField(info, "rdb_last_bgsave_status") != "ok" {
				h.t.Errorf("BGSAVE failed:\n%s", info)
			}
			h.saves.Add(1)
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
	h.t.Errorf("BGSAVE did not finish within a minute")
}

// killRedis notes which events the database holds (those must survive
// anything Redis loses), kills Redis with SIGKILL and restarts it on its
// files.
func (h *crashHarness) killRedis() {
	h.saveMu.Lock()
	defer h.saveMu.Unlock()
	for k, ids := range h.dbEventIDs() {
		if h.everInDB[k] == nil {
			h.everInDB[k] = map[string]bool{}
		}
		for _, id := range ids {
			h.everInDB[k][id] = true
		}
	}
	if *crashVerbose {
		rows := readDB(h.t, h.db)
		for k, evs := range rows.Events {
			var ev, st []int
			for _, e := range evs {
				n, _ := strconv.Atoi(e.ID[strings.LastIndex(e.ID, "-e")+2:])
				ev = append(ev, n)
			}
			for key := range rows.Sessions[k].State {
				if id, ok := strings.CutPrefix(key, "e:"); ok {
					n, _ := strconv.Atoi(id[strings.LastIndex(id, "-e")+2:])
					st = append(st, n)
				}
			}
			slices.Sort(st)
			h.t.Logf("before Redis kill %d: %v events %s state %s", h.epoch.Load(), k, numRanges(ev), numRanges(st))
		}
	}
	h.redis.Kill(h.t)
	// Start returns once Redis has loaded its files: serve does not start
	// on a Redis that still refuses commands with LOADING.
	h.redis.Start(h.t)
	h.restored = append(h.restored, h.saveGen.Load()) // the last BGSAVE has finished (saveMu)
	h.epoch.Add(1)
	h.redisKills++
}

func (h *crashHarness) dbEventIDs() map[sessKey][]string {
	out := map[sessKey][]string{}
	queryRows(h.t, h.db, `SELECT app_name, user_id, session_id, id FROM events ORDER BY "timestamp"`, func(rows *sql.Rows) error {
		var k sessKey
		var id string
		if err := rows.Scan(&k.app, &k.user, &k.sid, &id); err != nil {
			return err
		}
		out[k] = append(out[k], id)
		return nil
	})
	return out
}

// crashResult is the comparison of the database with the ledger.
type crashResult struct {
	stored, lostWithRedis, missing, duplicated, reordered, unknown int
	// State keys that do not match the events the database holds: all of
	// them, those of events it holds that the state lost, and those of
	// events it does not hold.
	stateMismatches, stateDropped, stateOfMissing int
	// stateOfLost counts the state keys of events lost with Redis before
	// flush (allowed, see checkState).
	stateOfLost int
	problems    []string
}

func (r *crashResult) problem(format string, args ...any) {
	r.problems = append(r.problems, fmt.Sprintf(format, args...))
}

// check compares the database's rows with the ledger, session by session:
// events (ordered by timestamp) once each, only acknowledged ones, in
// acknowledgement order, none missing but what a Redis restart may have
// lost; the session's state and its user's state those of the events the
// database holds, the last one's last.
func (h *crashHarness) check() crashResult {
	var r crashResult
	rows := readDB(h.t, h.db)
	final := h.epoch.Load()
	h.l.mu.Lock()
	defer h.l.mu.Unlock()
	for k := range rows.Events {
		if h.l.acked[k] == nil {
			r.problem("%v: %d events in the database of a session never appended to", k, len(rows.Events[k]))
		}
	}
	for k, acks := range h.l.acked {
		before := len(r.problems)
		index := map[string]int{}
		for i, a := range acks {
			index[a.id] = i
		}
		seen := map[string]bool{}
		prev := -1
		var kept []crashAck
		for _, ev := range rows.Events[k] {
			r.stored++
			i, ok := index[ev.ID]
			switch {
			case seen[ev.ID]:
				r.duplicated++
				r.problem("%v: event %s stored twice", k, ev.ID)
				continue
			case !ok:
				r.unknown++
				r.problem("%v: event %s stored but never acknowledged", k, ev.ID)
				continue
			case i < prev:
				r.reordered++
				r.problem("%v: event %s stored after %s, acknowledged before it", k, ev.ID, acks[prev].id)
			}
			seen[ev.ID] = true
			prev = max(prev, i)
			kept = append(kept, acks[i])
		}
		lost := map[string]bool{} // lost with Redis before flush
		for _, a := range acks {
			switch {
			case seen[a.id]:
			case h.everInDB[k][a.id]:
				r.missing++
				r.problem("%v: event %s is gone from the database, which held it before a Redis restart", k, a.id)
			case !h.mode.lossy:
				r.missing++
				r.problem("%v: acknowledged event %s missing", k, a.id)
			case a.epoch == final:
				r.missing++
				r.problem("%v: event %s acknowledged after the last Redis restart is missing", k, a.id)
			case !h.lostWithRedis(a):
				r.missing++
				r.problem("%v: event %s is missing, but every Redis restart after it came back from a snapshot "+
					"that holds it", k, a.id)
			default:
				r.lostWithRedis++
				lost[a.id] = true
			}
		}
		r.stateMismatches += h.checkState(&r, k, kept, lost, rows)
		if len(r.problems) > before {
			r.problems = slices.Insert(r.problems, before, h.summary(k, acks, rows))
		}
	}
	return r
}

// lostWithRedis: a Redis restart after a's acknowledgement came back from
// a snapshot taken before it.
func (h *crashHarness) lostWithRedis(a crashAck) bool {
	for _, save := range h.restored[a.epoch:] {
		if save <= a.saves {
			return true
		}
	}
	return false
}

// summary describes a session whose rows do not match: what was
// acknowledged (by Redis epoch), what the database holds, what its state
// has, as ranges of event numbers.
func (h *crashHarness) summary(k sessKey, acks []crashAck, rows dbRows) string {
	byEpoch := map[int64][]int{}
	var epochs []int64
	for _, a := range acks {
		if byEpoch[a.epoch] == nil {
			epochs = append(epochs, a.epoch)
		}
		byEpoch[a.epoch] = append(byEpoch[a.epoch], a.j)
	}
	var acked []string
	for _, e := range epochs {
		acked = append(acked, fmt.Sprintf("epoch %d: %s", e, numRanges(byEpoch[e])))
	}
	num := func(id string) int {
		n, _ := strconv.Atoi(id[strings.LastIndex(id, "-e")+2:])
		return n
	}
	var stored, state, before []int
	for _, ev := range rows.Events[k] {
		stored = append(stored, num(ev.ID))
	}
	for key := range rows.Sessions[k].State {
		if id, ok := strings.CutPrefix(key, "e:"); ok {
			state = append(state, num(id))
		}
	}
	for id := range h.everInDB[k] {
		before = append(before, num(id))
	}
	slices.Sort(state)
	slices.Sort(before)
	return fmt.Sprintf("%v: acknowledged %s; the database holds events %s (before Redis kills: %s), state keys of %s, last %v",
		k, strings.Join(acked, ", "), numRanges(stored), numRanges(before), numRanges(state), rows.Sessions[k].State["last"])
}

// numRanges writes event numbers as ranges: "0-5 7 9-12" (in their order).
func numRanges(ns []int) string {
	var parts []string
	for i := 0; i < len(ns); {
		j := i
		for j+1 < len(ns) && ns[j+1] == ns[j]+1 {
			j++
		}
		if j > i {
			parts = append(parts, fmt.Sprintf("%d-%d", ns[i], ns[j]))
		} else {
			parts = append(parts, strconv.Itoa(ns[i]))
		}
		i = j + 1
	}
	if parts == nil {
		return "none"
	}
	return strings.Join(parts, " ")
}

// checkState compares the session's and its user's state in the database
// with the events it holds (kept, in order). A key of an event lost with
// Redis before flush (lost) is counted but allowed: the state a batch
// writes is Redis's when it is read, which may hold the delta of a later
// event that Redis then lost with the event (docs/design.md, "Redis
// faults"); the event is the loss, its acknowledged delta is not.
func (h *crashHarness) checkState(r *crashResult, k sessKey, kept []crashAck, lost map[string]bool, rows dbRows) int {
	want := map[string]any{"init": k.sid}
	for _, a := range kept {
		want["last"] = a.id
		want["e:"+a.id] = float64(a.j)
	}
	bad := 0
	got := rows.Sessions[k].State
	for key := range mergeKeys(want, got) {
		if fmt.Sprint(want[key]) == fmt.Sprint(got[key]) {
			continue
		}
		if id, _ := got[key].(string); (key == "last" && lost[id]) || (strings.HasPrefix(key, "e:") && lost[key[2:]]) {
			r.stateOfLost++
			continue
		}
		bad++
		_, inDB := want[key]
		_, inState := got[key]
		switch {
		case strings.HasPrefix(key, "e:") && inDB && !inState:
			r.stateDropped++
			r.problem("%v: sessions.state lost the key of event %s, which the database holds", k, key[2:])
		case strings.HasPrefix(key, "e:") && !inDB && inState:
			r.stateOfMissing++
			r.problem("%v: sessions.state has the key of event %s, which the database does not hold", k, key[2:])
		default:
			r.problem("%v: sessions.state[%q] = %v, want %v", k, key, got[key], want[key])
		}
	}
	user := rows.Users[[2]string{k.app, k.user}]
	var last any
	if len(kept) > 0 {
		last = kept[len(kept)-1].id
	}
	if key := "last-" + k.sid; fmt.Sprint(user[key]) != fmt.Sprint(last) && !lost[fmt.Sprint(user[key])] {
		bad++
		r.problem("%v: user_states.state[%q] = %v, want %v", k, key, user[key], last)
	}
	return bad
}

func mergeKeys(a, b map[string]any) map[string]bool {
	out := map[string]bool{}
	for k := range a {
		out[k] = true
	}
	for k := range b {
		out[k] = true
	}
	return out
}
