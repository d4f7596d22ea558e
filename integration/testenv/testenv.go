// Package testenv gives integration tests the servers started by integration/testenv.sh.
//
// Run the tests through the harness, which starts a standalone Redis, a 3-master/3-replica Redis Cluster and a
// PostgreSQL 15 server on free 127.0.0.1 ports and exports their addresses:
//
//	integration/testenv.sh                                   # go test -race -count=1 -timeout 80m ./...
//	integration/testenv.sh go test -race -count=1 -v ./integration/...
//
// Every getter reads one environment variable. When it is missing the test is skipped, unless
// ADKSESSION_TEST_REQUIRE=1 (set by testenv.sh, so a broken harness can never turn into silent skips): then the
// test fails and names the variable.
//
// The servers are shared by every test of every package, and packages run in parallel. So:
//
//   - Never FLUSHALL/FLUSHDB or drop shared data: give every test its own namespace with UniqueName, and its own
//     database with FreshDatabase.
//   - Fault tests that stop, kill, restart or fail over a server should use their own private server
//     (StartRedis, StartCluster, StartPostgres), which other packages never see. PgCtl acts on the shared
//     PostgreSQL and briefly breaks every other package that is running at the same time.
package testenv

import (
	"bufio"
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/lib/pq"
)

// The environment variables exported by integration/testenv.sh.
const (
	EnvRedisURL        = "ADKSESSION_TEST_REDIS_URL"         // redis://127.0.0.1:P/0
	EnvClusterURL      = "ADKSESSION_TEST_REDIS_CLUSTER_URL" // redis+cluster://127.0.0.1:p1,...,127.0.0.1:p6
	EnvDatabaseURL     = "ADKSESSION_TEST_DATABASE_URL"      // postgres://USER@127.0.0.1:Q/adksession?sslmode=disable
	EnvPgCtl           = "ADKSESSION_TEST_PG_CTL"            // "[runuser -u USER --] PG_BIN/pg_ctl -D PGDATA -l LOG"
	EnvPgData          = "ADKSESSION_TEST_PGDATA"            // data directory of the shared PostgreSQL
	EnvPgBin           = "ADKSESSION_TEST_PG_BIN"            // /usr/lib/postgresql/15/bin
	EnvPgUser          = "ADKSESSION_TEST_PG_USER"           // OS user owning PGDATA = database superuser
	EnvPgRunAs         = "ADKSESSION_TEST_PG_RUNAS"          // "runuser -u USER --" when root, else ""
	EnvRedisServer     = "ADKSESSION_TEST_REDIS_SERVER"      // path of redis-server
	EnvRedisCLI        = "ADKSESSION_TEST_REDIS_CLI"         // path of redis-cli
	EnvRedisBenchmark  = "ADKSESSION_TEST_REDIS_BENCHMARK"   // path of redis-benchmark
	EnvChromium        = "ADKSESSION_TEST_CHROMIUM"          // /usr/bin/chromium, only when installed
	EnvTmpDir          = "ADKSESSION_TEST_TMPDIR"            // the harness temp dir (0755, removed afterwards)
	EnvRequire         = "ADKSESSION_TEST_REQUIRE"           // "1": missing servers fail tests instead of skipping
	defaultPgBin       = "/usr/lib/postgresql/15/bin"
	pgCtlTimeout       = 2 * time.Minute
	serverStartTimeout = 60 * time.Second
)

// Required reports whether missing servers must fail tests (ADKSESSION_TEST_REQUIRE=1) rather than skip them.
func Required() bool { return os.Getenv(EnvRequire) == "1" }

// missing skips t, or fails it when Required.
func missing(t testing.TB, what string) {
	t.Helper()
	if Required() {
		t.Fatalf("testenv: %s is not set although %s=1; run the tests through integration/testenv.sh, which "+
			"starts Redis, a Redis Cluster and PostgreSQL and sets it", what, EnvRequire)
	}
	t.Skipf("testenv: %s is not set; run integration/testenv.sh (e.g. `integration/testenv.sh go test ./...`) "+
		"to run this test", what)
}

func getenv(t testing.TB, name string) string {
	t.Helper()
	v := os.Getenv(name)
	if v == "" {
		missing(t, name)
	}
	return v
}

// RedisURL is the standalone Redis: "redis://127.0.0.1:P/0".
func RedisURL(t testing.TB) string { t.Helper(); return getenv(t, EnvRedisURL) }

// ClusterURL is the Redis Cluster (3 masters, 3 replicas), all six nodes:
// "redis+cluster://127.0.0.1:p1,127.0.0.1:p2,...".
func ClusterURL(t testing.TB) string { t.Helper(); return getenv(t, EnvClusterURL) }

// Deployment is a Redis that tests run against, by name: Standalone, Cluster
// or Embedded.
type Deployment struct {
	Name string
	URL  func(t testing.TB) string
}

// The Redis deployments tests run against. Embedded is a miniredis of the
// test (what `adksession serve` embeds), the others the harness's servers.
var (
	Standalone = Deployment{"standalone", RedisURL}
	Cluster    = Deployment{"cluster", ClusterURL}
	Embedded   = Deployment{"embedded", func(t testing.TB) string { return "redis://" + miniredis.RunT(t).Addr() + "/0" }}
)

// EachRedis runs f as a parallel subtest per deployment (Standalone and
// Cluster when none is named), with the deployment's URL.
func EachRedis(t *testing.T, f func(t *testing.T, url string), deployments ...Deployment) {
	if len(deployments) == 0 {
		deployments = []Deployment{Standalone, Cluster}
	}
	for _, d := range deployments {
		t.Run(d.Name, func(t *testing.T) {
			url := d.URL(t) // skips (or fails) without the harness's servers
			t.Parallel()
			f(t, url)
		})
	}
}

// ClusterAddrs is ClusterURL's node list, as "host:port" strings (for redis.ClusterOptions.Addrs).
func ClusterAddrs(t testing.TB) []string {
	t.Helper()
	return clusterAddrs(t, ClusterURL(t))
}

func clusterAddrs(t testing.TB, u string) []string {
	t.Helper()
	_, rest, ok := strings.Cut(u, "://")
	if !ok {
		t.Fatalf("testenv: cluster URL %q has no scheme", u)
	}
	if i := strings.IndexAny(rest, "/?#"); i >= 0 {
		rest = rest[:i]
	}
	if i := strings.LastIndex(rest, "@"); i >= 0 {
		rest = rest[i+1:]
	}
	var addrs []string
	for _, a := range strings.Split(rest, ",") {
		if a = strings.TrimSpace(a); a != "" {
			addrs = append(addrs, a)
		}
	}
	if len(addrs) == 0 {
		t.Fatalf("testenv: cluster URL %q lists no nodes", u)
	}
	return addrs
}

// DatabaseURL is the shared PostgreSQL database "adksession":
// "postgres://USER@127.0.0.1:Q/adksession?sslmode=disable". Prefer FreshDatabase for anything that writes.
func DatabaseURL(t testing.TB) string { t.Helper(); return getenv(t, EnvDatabaseURL) }

// PgCtl runs pg_ctl on the shared PostgreSQL, as the OS user owning its data directory, with -D and -l already
// given; args are the mode and its options, e.g.
//
//	testenv.PgCtl(t, "stop", "-m", "fast")
//	testenv.PgCtl(t, "start", "-w")
//	testenv.PgCtl(t, "status")   // fails the test when the server is not running (pg_ctl exits 3)
//
// It fails the test (with pg_ctl's output) when pg_ctl fails, and returns the output otherwise. After a "stop"
// or "kill", a cleanup restarts the server at the end of the test if it is still down, so later tests find it
// running. Stopping the shared server disturbs other packages running in parallel: prefer StartPostgres.
//
// The shell equivalent is `$ADKSESSION_TEST_PG_CTL stop -m fast` (the variable is split on spaces).
func PgCtl(t testing.TB, args ...string) string {
	t.Helper()
	prefix := strings.Fields(getenv(t, EnvPgCtl))
	if len(args) > 0 && (args[0] == "stop" || args[0] == "kill") {
		registerRestart(t, prefix)
	}
	return runPgCtl(t, prefix, args...)
}

var restartRegistered sync.Map // testing.TB -> struct{}

func registerRestart(t testing.TB, prefix []string) {
	if _, loaded := restartRegistered.LoadOrStore(t, struct{}{}); loaded {
		return
	}
	t.Cleanup(func() {
		restartRegistered.Delete(t)
		if out, code, _ := pgCtlExec(prefix, "status"); code == 3 || code == 4 {
			if out, _, err := pgCtlExec(prefix, "start", "-w"); err != nil {
				t.Errorf("testenv: restarting the shared PostgreSQL after the test: %v\n%s", err, out)
			}
		} else if code != 0 {
			t.Logf("testenv: pg_ctl status: exit %d\n%s", code, out)
		}
	})
}

func runPgCtl(t testing.TB, prefix []string, args ...string) string {
	t.Helper()
	out, _, err := pgCtlExec(prefix, args...)
	if err != nil {
		t.Fatalf("testenv: %s %s: %v\n%s", strings.Join(prefix, " "), strings.Join(args, " "), err, out)
	}
	return out
}

// pgCtlExec runs prefix+args and returns the combined output and exit code.
func pgCtlExec(prefix []string, args ...string) (string, int, error) {
	ctx, cancel := context.WithTimeout(context.Background(), pgCtlTimeout)
	defer cancel()
	argv := concat(prefix, args...)
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Dir = os.TempDir() // runuser keeps the cwd; the postgres user may not be able to read ours
	cmd.WaitDelay = 5 * time.Second
	out, err := cmd.CombinedOutput()
	code := 0
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		code = ee.ExitCode()
	} else if err != nil {
		code = -1
	}
	return string(out), code, err
}

// concat returns a new slice a+b (never aliasing a's backing array).
func concat(a []string, b ...string) []string {
	return append(append(make([]string, 0, len(a)+len(b)), a...), b...)
}

func toolPath(t testing.TB, env, name string) string {
	t.Helper()
	if p := os.Getenv(env); p != "" {
		return p
	}
	if p, err := exec.LookPath(name); err == nil {
		return p
	}
	missing(t, env+" (and "+name+" is not in PATH)")
	return ""
}

// RedisServerPath is the redis-server binary (ADKSESSION_TEST_REDIS_SERVER, else from PATH).
func RedisServerPath(t testing.TB) string {
	t.Helper()
	return toolPath(t, EnvRedisServer, "redis-server")
}

// RedisCLIPath is the redis-cli binary (ADKSESSION_TEST_REDIS_CLI, else from PATH).
func RedisCLIPath(t testing.TB) string { t.Helper(); return toolPath(t, EnvRedisCLI, "redis-cli") }

// RedisBenchmarkPath is the redis-benchmark binary (ADKSESSION_TEST_REDIS_BENCHMARK, else from PATH).
func RedisBenchmarkPath(t testing.TB) string {
	t.Helper()
	return toolPath(t, EnvRedisBenchmark, "redis-benchmark")
}

// ChromiumPath is a headless-capable Chromium: ADKSESSION_TEST_CHROMIUM, else chromium / chromium-browser /
// google-chrome from PATH. testenv.sh never installs it (.ci/run does), so when it is absent the test is
// skipped, except on CI (CI=true), where it fails. As root, Chromium needs --no-sandbox.
func ChromiumPath(t testing.TB) string {
	t.Helper()
	if p := os.Getenv(EnvChromium); p != "" {
		return p
	}
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "google-chrome-stable"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	if os.Getenv("CI") == "true" {
		t.Fatalf("testenv: no Chromium found (%s unset, none in PATH) on CI; .ci/run installs it", EnvChromium)
	}
	t.Skipf("testenv: no Chromium found (%s unset, none in PATH); `apt-get install chromium` to run this test",
		EnvChromium)
	return ""
}

// TempDir is a fresh directory for this test, removed at its end. Under testenv.sh it lives in
// ADKSESSION_TEST_TMPDIR and is world-traversable (0755), so servers running as another OS user (postgres)
// can use it, and testenv.sh kills whatever still runs from it if the test binary dies. Otherwise it is
// t.TempDir().
func TempDir(t testing.TB) string {
	t.Helper()
	base := os.Getenv(EnvTmpDir)
	if base == "" {
		// t.TempDir's directories are private (0700): open them to the
		// server users (postgres runs as another user when we are root).
		dir := t.TempDir()
		for _, d := range []string{filepath.Dir(dir), dir} {
			if err := os.Chmod(d, 0o755); err != nil {
				t.Fatalf("testenv: %v", err)
			}
		}
		return dir
	}
	dir, err := os.MkdirTemp(base, sanitize(t.Name(), 40)+"-")
	if err != nil {
		t.Fatalf("testenv: %v", err)
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatalf("testenv: %v", err)
	}
	t.Cleanup(func() {
		if err := os.RemoveAll(dir); err != nil {
			t.Logf("testenv: removing %s: %v", dir, err)
		}
	})
	return dir
}

// sanitize keeps [A-Za-z0-9_.-] and replaces anything else with '_', truncating to max bytes.
func sanitize(s string, max int) string {
	b := []byte(s)
	for i, c := range b {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-' ||
			c == '.') {
			b[i] = '_'
		}
	}
	if len(b) > max {
		b = b[:max]
	}
	return string(b)
}

func randomHex(n int) string {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		panic(err)
	}
	return hex.EncodeToString(b)
}

// UniqueName is prefix + the test's name (characters outside [A-Za-z0-9_.-] replaced by '_', at most 60
// bytes) + "-" + 8 random hex digits: unique per call, so tests sharing one Redis never see each other's keys
// (use it as Config.Namespace) and never need FLUSHALL.
func UniqueName(t testing.TB, prefix string) string {
	t.Helper()
	return prefix + sanitize(t.Name(), 60) + "-" + randomHex(4)
}

var (
	adminMu  sync.Mutex
	adminDBs = map[string]*sql.DB{}
)

func adminDB(t testing.TB, dsn string) *sql.DB {
	t.Helper()
	adminMu.Lock()
	defer adminMu.Unlock()
	if db := adminDBs[dsn]; db != nil {
		return db
	}
	db, err := sql.Open("postgres", dsn)
	if err != nil {
		t.Fatalf("testenv: opening %s: %v", dsn, err)
	}
	db.SetMaxOpenConns(4)
	db.SetMaxIdleConns(1)
	db.SetConnMaxIdleTime(10 * time.Second)
	adminDBs[dsn] = db
	return db
}

// FreshDatabase creates an empty database with a unique name on the shared PostgreSQL server and returns its
// URL (DatabaseURL with the database name replaced). It is dropped (WITH (FORCE), so open connections do not
// block it) when the test ends.
func FreshDatabase(t testing.TB) string {
	t.Helper()
	return freshDatabase(t, DatabaseURL(t))
}

// ExecSQLFile runs the statements of the file at path (fixture rows) on the database at dbURL.
func ExecSQLFile(t testing.TB, dbURL, path string) {
	t.Helper()
	script, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("testenv: %v", err)
	}
	db, err := sql.Open("postgres", dbURL)
	if err != nil {
		t.Fatalf("testenv: opening %s: %v", dbURL, err)
	}
	defer db.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if _, err := db.ExecContext(ctx, string(script)); err != nil {
		t.Fatalf("testenv: running %s: %v", path, err)
	}
}

func freshDatabase(t testing.TB, base string) string {
	t.Helper()
	u, err := url.Parse(base)
	if err != nil {
		t.Fatalf("testenv: bad database URL %q: %v", base, err)
	}
	// lower case, <= 63 bytes (NAMEDATALEN-1): "t_" + up to 50 + "_" + 10 hex
	name := "t_" + strings.ToLower(sanitize(t.Name(), 50)) + "_" + randomHex(5)
	name = strings.NewReplacer("-", "_", ".", "_").Replace(name)
	db := adminDB(t, base)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if _, err := db.ExecContext(ctx, "CREATE DATABASE "+pq.QuoteIdentifier(name)); err != nil {
		t.Fatalf("testenv: CREATE DATABASE %s: %v", name, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		if _, err := db.ExecContext(ctx, "DROP DATABASE IF EXISTS "+pq.QuoteIdentifier(name)+" WITH (FORCE)"); err != nil {
			t.Logf("testenv: DROP DATABASE %s: %v", name, err)
		}
	})
	u.Path = "/" + name
	return u.String()
}

// ---------------------------------------------------------------------------------------------------------------
// Private servers, for fault tests (kill, restart, fail over) that must not disturb the shared ones.
// ---------------------------------------------------------------------------------------------------------------

// freePort returns a port on 127.0.0.1 that nobody listens on, in 11000..21999 (below Linux's ephemeral range);
// with bus, port+10000 (the Redis Cluster bus) is free too. Another process may still grab it before the
// server binds it: callers retry.
func freePort(bus bool) (int, error) {
	for i := 0; i < 1000; i++ {
		b := make([]byte, 2)
		if _, err := rand.Read(b); err != nil {
			return 0, err
		}
		p := 11000 + (int(b[0])<<8|int(b[1]))%11000
		if !portFree(p) || bus && !portFree(p+10000) {
			continue
		}
		return p, nil
	}
	return 0, errors.New("no free port on 127.0.0.1")
}

func portFree(p int) bool {
	l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p)))
	if err != nil {
		return false
	}
	l.Close()
	return true
}

// RedisServer is a private redis-server started by StartRedis (or one node of StartCluster).
type RedisServer struct {
	Port    int
	Addr    string // "127.0.0.1:PORT"
	URL     string // "redis://127.0.0.1:PORT/0"
	Dir     string // its working directory (RDB / AOF files)
	LogFile string

	bin  string
	args []string

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{} // closed when cmd has exited
}

// StartRedis starts a private redis-server on 127.0.0.1 with its own directory, killed at the end of the test.
// By default it has no persistence (--save "" --appendonly no); extra args are redis-server options that
// override that, e.g. StartRedis(t, "--appendonly", "yes", "--appendfsync", "always").
func StartRedis(t testing.TB, args ...string) *RedisServer {
	t.Helper()
	return startRedis(t, TempDir(t), false, args...)
}

func startRedis(t testing.TB, baseDir string, bus bool, args ...string) *RedisServer {
	t.Helper()
	bin := RedisServerPath(t)
	var lastErr error
	for attempt := 0; attempt < 5; attempt++ {
		port, err := freePort(bus)
		if err != nil {
			t.Fatalf("testenv: %v", err)
		}
		s := &RedisServer{
			Port: port, Addr: fmt.Sprintf("127.0.0.1:%d", port), URL: fmt.Sprintf("redis://127.0.0.1:%d/0", port),
			Dir: filepath.Join(baseDir, fmt.Sprintf("redis-%d", port)), bin: bin,
		}
		s.LogFile = filepath.Join(s.Dir, "redis.log")
		if err := os.MkdirAll(s.Dir, 0o755); err != nil {
			t.Fatalf("testenv: %v", err)
		}
		s.args = []string{"--bind", "127.0.0.1", "--port", strconv.Itoa(port), "--dir", s.Dir,
			"--logfile", s.LogFile, "--daemonize", "no", "--enable-debug-command", "yes"}
		if !hasOpt(args, "--save") {
			s.args = append(s.args, "--save", "")
		}
		if !hasOpt(args, "--appendonly") {
			s.args = append(s.args, "--appendonly", "no")
		}
		s.args = append(s.args, args...)
		if bus {
			s.args = append(s.args, "--cluster-config-file", filepath.Join(s.Dir, "nodes.conf"))
		}
		if lastErr = s.start(); lastErr == nil {
			t.Cleanup(func() { s.kill() })
			return s
		}
		if !strings.Contains(strings.ToLower(lastErr.Error()), "address already in use") {
			break
		}
	}
	t.Fatalf("testenv: starting redis-server: %v", lastErr)
	return nil
}

func hasOpt(args []string, opt string) bool {
	for _, a := range args {
		if a == opt {
			return true
		}
	}
	return false
}

func (s *RedisServer) start() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.done != nil {
		select {
		case <-s.done:
		default:
			return fmt.Errorf("redis-server %s is already running", s.Addr)
		}
	}
	cmd := exec.Command(s.bin, s.args...)
	cmd.Dir = s.Dir
	logf, err := os.OpenFile(s.LogFile, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer logf.Close()
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		return err
	}
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	s.cmd, s.done = cmd, done
	deadline := time.Now().Add(serverStartTimeout)
	for {
		select {
		case <-done:
			return fmt.Errorf("redis-server on %s exited during startup:\n%s", s.Addr, tailFile(s.LogFile, 20))
		default:
		}
		// This very process, done loading its AOF or RDB (a server still
		// loading answers INFO but refuses data commands with LOADING).
		if info, err := RespDo(s.Addr, "INFO", "server"); err == nil &&
			InfoField(info, "process_id") == strconv.Itoa(cmd.Process.Pid) {
			if p, err := RespDo(s.Addr, "INFO", "persistence"); err == nil && InfoField(p, "loading") == "0" {
				return nil
			}
		}
		if time.Now().After(deadline) {
			cmd.Process.Kill()
			<-done
			return fmt.Errorf("redis-server on %s did not answer within %v:\n%s", s.Addr, serverStartTimeout,
				tailFile(s.LogFile, 20))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func (s *RedisServer) signal(sig syscall.Signal) {
	s.mu.Lock()
	cmd, done := s.cmd, s.done
	s.mu.Unlock()
	if cmd == nil {
		return
	}
	select {
	case <-done:
		return
	default:
	}
	cmd.Process.Signal(sig)
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		cmd.Process.Kill()
		<-done
	}
}

func (s *RedisServer) kill() { s.signal(syscall.SIGKILL) }

// Stop shuts the server down cleanly (SIGTERM: with AOF it is fsynced, with --save an RDB is written) and waits.
func (s *RedisServer) Stop(t testing.TB) { t.Helper(); s.signal(syscall.SIGTERM) }

// Kill kills the server with SIGKILL (a crash: nothing is saved beyond what is already on disk) and waits.
func (s *RedisServer) Kill(t testing.TB) { t.Helper(); s.kill() }

// Start starts a stopped server again, same port, directory and options (so it reloads its AOF / RDB), and
// waits until it has loaded them and serves data commands.
func (s *RedisServer) Start(t testing.TB) {
	t.Helper()
	if err := s.start(); err != nil {
		t.Fatalf("testenv: restarting redis-server: %v", err)
	}
}

// Running reports whether the process is alive.
func (s *RedisServer) Running() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.done == nil {
		return false
	}
	select {
	case <-s.done:
		return false
	default:
		return true
	}
}

// ServesSlot tells whether the slot fields of a CLUSTER NODES line (its
// fields from the ninth on: "0-5460", "5461", "[...]" for a slot in
// migration) hold slot.
func ServesSlot(ranges []string, slot int) bool {
	for _, r := range ranges {
		lo, hi, found := strings.Cut(r, "-")
		if !found {
			hi = lo
		}
		a, errA := strconv.Atoi(lo)
		b, errB := strconv.Atoi(hi)
		if errA == nil && errB == nil && a <= slot && slot <= b {
			return true
		}
	}
	return false
}

// RedisCluster is a private Redis Cluster started by StartCluster.
type RedisCluster struct {
	Nodes []*RedisServer // the six nodes; which ones are masters changes with failovers
	Addrs []string       // "127.0.0.1:PORT" of every node
	URL   string         // "redis+cluster://" + Addrs joined with ","
}

// StartCluster starts a private Redis Cluster of 3 masters and 3 replicas (cluster-node-timeout 2000 ms),
// extra args going to every redis-server, and waits until it is healthy. Killed at the end of the test.
func StartCluster(t testing.TB, args ...string) *RedisCluster {
	t.Helper()
	cli := RedisCLIPath(t)
	dir := TempDir(t)
	c := &RedisCluster{}
	nodeArgs := concat([]string{"--cluster-enabled", "yes", "--cluster-node-timeout", "2000",
		"--repl-diskless-sync-delay", "0"}, args...)
	for i := 0; i < 6; i++ {
		n := startRedis(t, dir, true, nodeArgs...)
		c.Nodes = append(c.Nodes, n)
		c.Addrs = append(c.Addrs, n.Addr)
	}
	c.URL = "redis+cluster://" + strings.Join(c.Addrs, ",")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, cli, concat(concat([]string{"--cluster", "create"}, c.Addrs...),
		"--cluster-replicas", "1", "--cluster-yes")...)
	cmd.WaitDelay = 5 * time.Second
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("testenv: redis-cli --cluster create: %v\n%s", err, out)
	}
	c.WaitHealthy(t, serverStartTimeout)
	return c
}

// WaitHealthy waits until every running node reports cluster_state:ok with all 16384 slots served, and every
// running master has a connected replica whose link is up (when the cluster has as many running replicas), or
// fails the test after timeout.
func (c *RedisCluster) WaitHealthy(t testing.TB, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	var why string
	for {
		if why = c.unhealthy(); why == "" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("testenv: Redis Cluster not healthy after %v: %s", timeout, why)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func (c *RedisCluster) unhealthy() string {
	var running, masters, replicas, linked int
	for _, n := range c.Nodes {
		if !n.Running() {
			continue
		}
		running++
		info, err := RespDo(n.Addr, "CLUSTER", "INFO")
		if err != nil {
			return n.Addr + ": " + err.Error()
		}
		if InfoField(info, "cluster_state") != "ok" || InfoField(info, "cluster_slots_ok") != "16384" {
			return n.Addr + ": " + strings.ReplaceAll(firstLines(info, 3), "\r\n", " ")
		}
		repl, err := RespDo(n.Addr, "INFO", "replication")
		if err != nil {
			return n.Addr + ": " + err.Error()
		}
		if InfoField(repl, "role") == "master" {
			masters++
		} else {
			replicas++
			if strings.Contains(repl, "master_link_status:up") && strings.Contains(repl, "master_sync_in_progress:0") {
				linked++
			}
		}
	}
	if masters < 3 {
		return fmt.Sprintf("%d masters among %d running nodes", masters, running)
	}
	if linked < replicas {
		return fmt.Sprintf("%d of %d replicas linked", linked, replicas)
	}
	return ""
}

func firstLines(s string, n int) string {
	lines := strings.SplitN(s, "\n", n+1)
	if len(lines) > n {
		lines = lines[:n]
	}
	return strings.Join(lines, "\n")
}

// PostgresServer is a private PostgreSQL started by StartPostgres.
type PostgresServer struct {
	Port    int
	URL     string // postgres://USER@127.0.0.1:PORT/adksession?sslmode=disable
	DataDir string
	LogFile string
	pgCtl   []string // runas + pg_ctl -D DataDir -l LogFile
}

// StartPostgres initdb's and starts a private PostgreSQL 15 (trust auth, fsync off) with a database
// "adksession", stopped (immediate) at the end of the test. Takes a second or two.
func StartPostgres(t testing.TB) *PostgresServer {
	t.Helper()
	bin := os.Getenv(EnvPgBin)
	if bin == "" {
		bin = defaultPgBin
	}
	if _, err := os.Stat(filepath.Join(bin, "initdb")); err != nil {
		missing(t, EnvPgBin+" (no initdb in "+bin+")")
	}
	runAs, osUser := pgRunAs(t)
	root := TempDir(t)
	if len(runAs) > 0 {
		chownTo(t, root, osUser)
	}
	s := &PostgresServer{DataDir: filepath.Join(root, "data"), LogFile: filepath.Join(root, "postgres.log")}
	out, _, err := pgCtlExec(concat(runAs, filepath.Join(bin, "initdb")), "-D", s.DataDir, "-A", "trust", "-U",
		osUser, "-E", "UTF8", "--locale=C", "--no-sync")
	if err != nil {
		t.Fatalf("testenv: initdb: %v\n%s", err, out)
	}
	s.pgCtl = concat(runAs, filepath.Join(bin, "pg_ctl"), "-D", s.DataDir, "-l", s.LogFile)
	t.Cleanup(func() { pgCtlExec(s.pgCtl, "stop", "-m", "immediate") })
	for attempt := 0; ; attempt++ {
		port, err := freePort(false)
		if err != nil {
			t.Fatalf("testenv: %v", err)
		}
		conf := fmt.Sprintf("\nlisten_addresses = '127.0.0.1'\nport = %d\nunix_socket_directories = '%s'\n"+
			"fsync = off\nsynchronous_commit = off\nfull_page_writes = off\nmax_connections = 100\n", port, root)
		f, err := os.OpenFile(filepath.Join(s.DataDir, "postgresql.conf"), os.O_APPEND|os.O_WRONLY, 0)
		if err != nil {
			t.Fatalf("testenv: %v", err)
		}
		f.WriteString(conf)
		f.Close()
		out, _, err := pgCtlExec(s.pgCtl, "start", "-w")
		if err == nil {
			s.Port = port
			break
		}
		log := tailFile(s.LogFile, 20)
		if attempt < 4 && strings.Contains(log, "could not bind") {
			continue
		}
		t.Fatalf("testenv: pg_ctl start: %v\n%s\n%s", err, out, log)
	}
	admin := fmt.Sprintf("postgres://%s@127.0.0.1:%d/postgres?sslmode=disable", url.PathEscape(osUser), s.Port)
	db, err := sql.Open("postgres", admin)
	if err != nil {
		t.Fatalf("testenv: %v", err)
	}
	defer db.Close()
	if _, err := db.Exec("CREATE DATABASE adksession"); err != nil {
		t.Fatalf("testenv: CREATE DATABASE adksession: %v", err)
	}
	s.URL = fmt.Sprintf("postgres://%s@127.0.0.1:%d/adksession?sslmode=disable", url.PathEscape(osUser), s.Port)
	return s
}

// PgCtl runs pg_ctl on this server (like the package-level PgCtl), e.g. s.PgCtl(t, "stop", "-m", "fast").
func (s *PostgresServer) PgCtl(t testing.TB, args ...string) string {
	t.Helper()
	return runPgCtl(t, s.pgCtl, args...)
}

// Stop stops the server with pg_ctl stop -m MODE ("smart", "fast" or "immediate"; "" = fast).
func (s *PostgresServer) Stop(t testing.TB, mode string) {
	t.Helper()
	if mode == "" {
		mode = "fast"
	}
	s.PgCtl(t, "stop", "-w", "-m", mode)
}

// Start starts a stopped server again (same port and data) and waits until it accepts connections.
func (s *PostgresServer) Start(t testing.TB) { t.Helper(); s.PgCtl(t, "start", "-w") }

// FreshDatabase is the package-level FreshDatabase on this server.
func (s *PostgresServer) FreshDatabase(t testing.TB) string {
	t.Helper()
	return freshDatabase(t, s.URL)
}

// pgRunAs returns the command prefix that runs PostgreSQL programs as the right OS user, and that user.
func pgRunAs(t testing.TB) ([]string, string) {
	t.Helper()
	if os.Geteuid() != 0 {
		u, err := user.Current()
		if err != nil {
			t.Fatalf("testenv: %v", err)
		}
		return nil, u.Username
	}
	name := os.Getenv(EnvPgUser)
	if name == "" {
		if _, err := user.Lookup("postgres"); err == nil {
			name = "postgres"
		} else {
			missing(t, EnvPgUser+" (initdb cannot run as root, and there is no postgres user)")
		}
	}
	if runAs := strings.Fields(os.Getenv(EnvPgRunAs)); len(runAs) > 0 {
		return runAs, name
	}
	return []string{"runuser", "-u", name, "--"}, name
}

func chownTo(t testing.TB, dir, name string) {
	t.Helper()
	u, err := user.Lookup(name)
	if err != nil {
		t.Fatalf("testenv: %v", err)
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	if err := os.Chown(dir, uid, gid); err != nil {
		t.Fatalf("testenv: %v", err)
	}
}

func tailFile(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return "(" + err.Error() + ")"
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// InfoField is the value of one field of an INFO (or CLUSTER INFO) reply, "" when it has none. Fields are
// read by line: a substring test confuses fields that end alike ("loading:0" is also in "async_loading:0").
func InfoField(info, name string) string {
	for line := range strings.Lines(info) {
		if v, ok := strings.CutPrefix(line, name+":"); ok {
			return strings.TrimRight(v, "\r\n")
		}
	}
	return ""
}

// RespDo sends one command to a Redis server at addr over a fresh connection and returns the reply as a
// string (status, bulk string or integer; arrays are not supported). A Redis error reply is returned as an
// error. Handy for DEBUG / CLUSTER / INFO commands in fault tests without a client library.
func RespDo(addr string, args ...string) (string, error) {
	conn, err := net.DialTimeout("tcp", addr, 2*time.Second)
	if err != nil {
		return "", err
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(10 * time.Second))
	var b strings.Builder
	fmt.Fprintf(&b, "*%d\r\n", len(args))
	for _, a := range args {
		fmt.Fprintf(&b, "$%d\r\n%s\r\n", len(a), a)
	}
	if _, err := io.WriteString(conn, b.String()); err != nil {
		return "", err
	}
	r := bufio.NewReader(conn)
	line, err := r.ReadString('\n')
	if err != nil {
		return "", err
	}
	line = strings.TrimRight(line, "\r\n")
	if line == "" {
		return "", errors.New("empty reply")
	}
	switch line[0] {
	case '+', ':':
		return line[1:], nil
	case '-':
		return "", errors.New(line[1:])
	case '$', '=':
		n, err := strconv.Atoi(line[1:])
		if err != nil {
			return "", fmt.Errorf("bad reply %q", line)
		}
		if n < 0 {
			return "", nil
		}
		buf := make([]byte, n+2)
		if _, err := io.ReadFull(r, buf); err != nil {
			return "", err
		}
		return string(buf[:n]), nil
	default:
		return "", fmt.Errorf("unsupported reply %q", line)
	}
}
