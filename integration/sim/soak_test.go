package sim

// The soak: a sustained mixed load (appends, windowed and full reads, lists,
// deletes, rewinds) with the flusher on, against a private Redis with
// maxmemory and volatile-lru, recording Redis memory (in all, per session,
// per event), flush lag and backlog, and the process's goroutines and heap
// over time. Nothing may grow without bound: the last third of the run is
// compared with the middle third. Then everything acknowledged must reach
// Postgres.

import (
	"context"
	"database/sql"
	"flag"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/adksession/adksession/cache"
	"github.com/adksession/adksession/integration/testenv"
	"github.com/adksession/adksession/service"
)

var (
	soakDuration  = flag.Duration("soak.duration", 60*time.Second, "how long the soak's load runs")
	soakMaxMemory = flag.String("soak.maxmemory", "32mb", "maxmemory of the soak's Redis")
	soakWorkers   = flag.Int("soak.workers", 6, "concurrent clients of the soak")
	soakOut       = flag.String("soak.out", "", "directory to write soak.svg and soak.md (the figures) into")
)

// sample is the state of the deployment at one moment.
type sample struct {
	T                   float64 // seconds since the start
	UsedMB, MaxMB       float64
	Evicted, Keys       int64
	Backlog             int64
	LagS                float64
	Goroutines          int
	HeapMB              float64
	Appends, Errors     int64
	OOMs                int64
	SessionB, EventB    float64 // Redis bytes per cached session (its hashes) and per cached event
	FlushedEvents       int64
	LiveSessions, Users int
}

// soakSession is a session a worker drives, with what it was acknowledged.
type soakSession struct {
	key    sessKey
	h      *service.Session
	events int64 // acknowledged events (appends and rewinds)
	invs   []string
	dead   bool // deleted
}

type soak struct {
	t    *testing.T
	svc  *service.Service
	rdb  redis.UniversalClient
	keys cache.Keys
	db   *sql.DB

	appends, errs, ooms atomic.Int64
	firstErr            atomic.Value

	mu       sync.Mutex
	live     []*soakSession // every worker's current sessions (sampled for MEMORY USAGE)
	sessions []*soakSession // every session ever created
}

func TestSoak(t *testing.T) {
	r := testenv.StartRedis(t, "--maxmemory", *soakMaxMemory, "--maxmemory-policy", "volatile-lru")
	pg := testenv.StartPostgres(t)
	ctx := context.Background()
	require.NoError(t, service.Migrate(ctx, pg.URL))
	cfg := service.Config{RedisURL: r.URL, DatabaseURL: pg.URL, Namespace: "soak:", ConcurrentAppends: true,
		Logger: simConfig("", "").Logger}
	svc, err := service.Open(ctx, cfg)
	require.NoError(t, err)
	s := &soak{t: t, svc: svc}
	s.rdb, err = cache.NewClient(r.URL)
	require.NoError(t, err)
	s.keys, err = cache.NewKeys(cfg.Namespace, 0)
	require.NoError(t, err)
	s.db, err = sql.Open("postgres", pg.URL)
	require.NoError(t, err)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		svc.Close(ctx)
		s.rdb.Close()
		s.db.Close()
	})

	stop := make(chan struct{})
	var wg sync.WaitGroup
	for w := range *soakWorkers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s.worker(w, stop)
		}()
	}
	start := time.Now()
	every := max(time.Second, *soakDuration/90)
	var samples []sample
	tick := time.NewTicker(every)
	for time.Since(start) < *soakDuration {
		<-tick.C
		samples = append(samples, s.sample(start))
	}
	tick.Stop()
	close(stop)
	wg.Wait()

	// Everything acknowledged reaches the database.
	fctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	flushStart := time.Now()
	require.NoError(t, svc.Flush(fctx), "flush after the load")
	drained := time.Since(flushStart)
	samples = append(samples, s.sample(start))
	b, err := svc.Backlog(fctx)
	require.NoError(t, err)
	require.Zero(t, b.Entries, "backlog after the flush")
	require.Zero(t, b.Dead, "dead letters")
	s.checkRows(fctx)

	first, _ := s.firstErr.Load().(string)
	t.Logf("%d appends acknowledged, %d refused while Redis was full, %d other errors (first: %s); drained in %v after the load",
		s.appends.Load(), s.ooms.Load(), s.errs.Load(), first, drained.Round(time.Millisecond))
	require.Zero(t, s.errs.Load(), "errors other than a full Redis refusing a write: first %s", first)
	report := soakReport(samples, *soakMaxMemory, *soakWorkers, drained)
	t.Log("\n" + report)
	if *soakOut != "" {
		require.NoError(t, os.MkdirAll(*soakOut, 0o755))
		require.NoError(t, os.WriteFile(filepath.Join(*soakOut, "soak.svg"), []byte(soakChart(samples, *soakMaxMemory)), 0o644))
		require.NoError(t, os.WriteFile(filepath.Join(*soakOut, "soak.md"), []byte(report), 0o644))
	}
	checkTrends(t, samples[:len(samples)-1])
}

// worker drives sessions of its own: appends (most), windowed and full
// reads, lists, rewinds, deletes; a session is retired after a while
// (deleted, or left to go idle and be evicted) and a new one created.
func (s *soak) worker(w int, stop <-chan struct{}) {
	rng := rand.New(rand.NewPCG(uint64(w), 7))
	ctx := context.Background()
	var mine []*soakSession
	n := 0
	text := strings.Repeat("lorem ipsum dolor sit amet ", 30) // ~800 bytes of content
	for {
		select {
		case <-stop:
			return
		default:
		}
		n++
		if len(mine) < 8 || rng.IntN(40) == 0 {
			k := sessKey{"soak-app", fmt.Sprintf("user-%d", rng.IntN(40)), fmt.Sprintf("w%d-s%d", w, n)}
			resp, err := s.svc.Create(ctx, &service.CreateRequest{AppName: k.App, UserID: k.User, SessionID: k.SID,
				State: map[string]any{"created": n, "user:seen": n}})
			if s.failed(err) {
				continue
			}
			ss := &soakSession{key: k, h: resp.Session}
			mine = append(mine, ss)
			s.mu.Lock()
			s.sessions = append(s.sessions, ss)
			s.mu.Unlock()
			if len(mine) > 30 { // retire the oldest: deleted, or left idle
				old := mine[0]
				mine = mine[1:]
				old.h = nil    // a handle holds the events appended through it: the worker lets it go
				old.invs = nil // and the invocations it may rewind to (the test's own memory stays flat)
				if rng.IntN(3) == 0 {
					err := s.svc.Delete(ctx, &service.DeleteRequest{AppName: old.key.App, UserID: old.key.User, SessionID: old.key.SID})
					if !s.failed(err) {
						old.dead = true
					}
				}
			}
			s.mu.Lock()
			s.live = slices.DeleteFunc(s.live, func(x *soakSession) bool { return strings.HasPrefix(x.key.SID, fmt.Sprintf("w%d-", w)) })
			s.live = append(s.live, mine...)
			s.mu.Unlock()
			continue
		}
		ss := mine[rng.IntN(len(mine))]
		k := ss.key
		switch r := rng.IntN(100); {
		case r < 65:
			inv := fmt.Sprintf("w%d-inv-%d", w, n/5)
			if len(ss.invs) == 0 || ss.invs[len(ss.invs)-1] != inv {
				ss.invs = append(ss.invs, inv)
			}
			ev := &service.Event{InvocationID: inv, Author: "model",
				Content: []byte(fmt.Sprintf(`{"role":"model","parts":[{"text":%q}]}`, text[:400+rng.IntN(400)])),
				Actions: service.EventActions{StateDelta: map[string]any{
					"turn": n, fmt.Sprintf("k%d", rng.IntN(20)): text[:rng.IntN(100)], "user:last": n, "temp:scratch": n}}}
			if err := s.svc.AppendEvent(ctx, ss.h, ev); !s.failed(err) {
				ss.events++
				s.appends.Add(1)
			}
			if ss.events%20 == 0 {
				// A handle keeps every event appended through it, as an
				// agent's runner holds its session for a turn: take a fresh one.
				resp, err := s.svc.Get(ctx, &service.GetRequest{AppName: k.App, UserID: k.User, SessionID: k.SID, NumRecentEvents: 5})
				if !s.failed(err) {
					ss.h = resp.Session
				}
			}
		case r < 80:
			_, err := s.svc.Get(ctx, &service.GetRequest{AppName: k.App, UserID: k.User, SessionID: k.SID, NumRecentEvents: 5})
			s.failed(err)
		case r < 85:
			_, err := s.svc.Get(ctx, &service.GetRequest{AppName: k.App, UserID: k.User, SessionID: k.SID})
			s.failed(err)
		case r < 92:
			_, err := s.svc.List(ctx, &service.ListRequest{AppName: k.App, UserID: k.User, PageSize: 20})
			s.failed(err)
		case r < 97 && len(ss.invs) > 1:
			_, err := s.svc.Rewind(ctx, &service.RewindRequest{AppName: k.App, UserID: k.User, SessionID: k.SID,
				BeforeInvocationID: ss.invs[rng.IntN(len(ss.invs))]})
			if !s.failed(err) {
				ss.events++
			}
		default:
			_, err := s.svc.GetUserState(ctx, &service.UserStateRequest{AppName: k.App, UserID: k.User})
			s.failed(err)
		}
	}
}

// failed counts an error: a full Redis refusing a write is expected (it
// recovers once the flusher made memory evictable), anything else is not.
func (s *soak) failed(err error) bool {
	switch {
	case err == nil:
		return false
	case strings.Contains(err.Error(), "OOM") || strings.Contains(strings.ToLower(err.Error()), "redis is full"):
		s.ooms.Add(1)
	default:
		s.errs.Add(1)
		s.firstErr.CompareAndSwap(nil, err.Error())
	}
	return true
}

func infoField(info, name string) float64 {
	f, _ := strconv.ParseFloat(testenv.InfoField(info, name), 64)
	return f
}

func (s *soak) sample(start time.Time) sample {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	x := sample{T: time.Since(start).Seconds(), Goroutines: runtime.NumGoroutine(),
		Appends: s.appends.Load(), Errors: s.errs.Load(), OOMs: s.ooms.Load()}
	// The live heap: what a collection keeps (the heap in use between
	// collections swings with the garbage not yet collected).
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	x.HeapMB = float64(ms.HeapAlloc) / (1 << 20)
	if info, err := s.rdb.Info(ctx, "memory", "stats").Result(); err == nil {
		x.UsedMB = infoField(info, "used_memory") / (1 << 20)
		x.MaxMB = infoField(info, "maxmemory") / (1 << 20)
		x.Evicted = int64(infoField(info, "evicted_keys"))
	}
	x.Keys, _ = s.rdb.DBSize(ctx).Result()
	if b, err := s.svc.Backlog(ctx); err == nil {
		x.Backlog, x.LagS = b.Entries, b.Lag.Seconds()
	}
	x.FlushedEvents = s.svc.FlusherStats().Events
	// Memory per session and per event: MEMORY USAGE of the keys of a few
	// live sessions Redis holds.
	s.mu.Lock()
	live := slices.Clone(s.live)
	x.LiveSessions = len(s.sessions)
	s.mu.Unlock()
	rand.Shuffle(len(live), func(i, j int) { live[i], live[j] = live[j], live[i] })
	var sessBytes, evBytes, events, sessions float64
	for _, ss := range live[:min(20, len(live))] {
		sk := s.keys.Session(ss.key.App, ss.key.User, ss.key.SID)
		pipe := s.rdb.Pipeline()
		hash, undo := pipe.MemoryUsage(ctx, sk.Session, 0), pipe.MemoryUsage(ctx, sk.Undo, 0)
		evs, ids, n := pipe.MemoryUsage(ctx, sk.Events, 0), pipe.MemoryUsage(ctx, sk.EventIDs, 0), pipe.ZCard(ctx, sk.Events)
		pipe.Exec(ctx)
		if hash.Val() == 0 || n.Val() == 0 {
			continue // evicted
		}
		sessions++
		sessBytes += float64(hash.Val() + undo.Val())
		events += float64(n.Val())
		evBytes += float64(evs.Val() + ids.Val())
	}
	if sessions > 0 && events > 0 {
		x.SessionB, x.EventB = sessBytes/sessions, evBytes/events
	}
	return x
}

// checkRows: after the flush, every session has exactly the events it was
// acknowledged in the database; deleted ones have none.
func (s *soak) checkRows(ctx context.Context) {
	counts := map[string]int64{}
	rows, err := s.db.QueryContext(ctx, `SELECT session_id, count(*) FROM events WHERE app_name = 'soak-app' GROUP BY session_id`)
	require.NoError(s.t, err)
	defer rows.Close()
	for rows.Next() {
		var sid string
		var n int64
		require.NoError(s.t, rows.Scan(&sid, &n))
		counts[sid] = n
	}
	require.NoError(s.t, rows.Err())
	s.mu.Lock()
	defer s.mu.Unlock()
	var bad []string
	for _, ss := range s.sessions {
		want := ss.events
		if ss.dead {
			want = 0
		}
		if counts[ss.key.SID] != want {
			bad = append(bad, fmt.Sprintf("%s: %d events rows, %d acknowledged (deleted %v)", ss.key.SID, counts[ss.key.SID], want, ss.dead))
		}
	}
	require.Empty(s.t, bad, "events rows of %d sessions", len(s.sessions))
}

// thirds returns the middle and last thirds of the samples' values.
func thirds(samples []sample, f func(sample) float64) (mid, last []float64) {
	n := len(samples)
	for i, x := range samples {
		switch {
		case i >= 2*n/3:
			last = append(last, f(x))
		case i >= n/3:
			mid = append(mid, f(x))
		}
	}
	return mid, last
}

func median(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	w := slices.Sorted(slices.Values(v))
	if n := len(w); n%2 == 0 {
		return (w[n/2-1] + w[n/2]) / 2
	}
	return w[len(w)/2]
}

func mean(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := 0.0
	for _, x := range v {
		s += x
	}
	return s / float64(len(v))
}

// checkTrends: nothing grows without bound (see trendProblems).
func checkTrends(t *testing.T, samples []sample) {
	t.Helper()
	if len(samples) < 9 {
		t.Fatalf("%d samples: too few to see a trend", len(samples))
	}
	for _, p := range trendProblems(samples) {
		t.Error(p)
	}
}

// trendProblems compares the last third of the run with the middle third,
// with slack (no rates, no timings), and says what grows.
func trendProblems(samples []sample) []string {
	var out []string
	for _, c := range []struct {
		name  string
		f     func(sample) float64
		limit func(mid []float64) float64
		agg   func([]float64) float64
	}{
		// Redis fills up to its maxmemory (sooner or later, depending on the
		// machine's speed) and stays there: growth up to it is bounded by
		// configuration; above it is checked per sample below.
		{"Redis used memory (MB)", func(x sample) float64 { return x.UsedMB }, func(m []float64) float64 { return max(mean(m)*1.25+4, samples[0].MaxMB) }, mean},
		{"heap (MB)", func(x sample) float64 { return x.HeapMB }, func(m []float64) float64 { return mean(m)*1.5 + 16 }, mean},
		// Goroutines come and go with the operations in flight (group commit,
		// the flusher's workers): one sample may spike on a loaded machine; a
		// leak raises them all, and so the median, by as much as the maximum
		// (the bound is the maximum's: 16 more over a third of the run).
		{"goroutines", func(x sample) float64 { return float64(x.Goroutines) }, func(m []float64) float64 { return median(m) + 16 }, median},
		{"backlog (entries)", func(x sample) float64 { return float64(x.Backlog) }, func(m []float64) float64 { return mean(m)*2 + 2000 }, mean},
		{"flush lag (s)", func(x sample) float64 { return x.LagS }, func(m []float64) float64 { return mean(m)*2 + 5 }, mean},
		{"Redis bytes per cached event", func(x sample) float64 { return x.EventB }, func(m []float64) float64 { return mean(m)*1.5 + 200 }, mean},
		{"Redis bytes per cached session", func(x sample) float64 { return x.SessionB }, func(m []float64) float64 { return mean(m)*1.5 + 2000 }, mean},
	} {
		mid, last := thirds(samples, c.f)
		if got, limit := c.agg(last), c.limit(mid); got > limit {
			out = append(out, fmt.Sprintf("%s grows: %.1f in the last third, %.1f in the middle third (limit %.1f)", c.name, got, c.agg(mid), limit))
		}
	}
	for _, x := range samples {
		if x.MaxMB > 0 && x.UsedMB > x.MaxMB*1.1 {
			out = append(out, fmt.Sprintf("Redis used %.1f MB at %.0fs, maxmemory %.1f MB", x.UsedMB, x.T, x.MaxMB))
		}
	}
	return out
}

// soakReport is the figures of a run, in markdown.
func soakReport(samples []sample, maxmemory string, workers int, drained time.Duration) string {
	var b strings.Builder
	last := samples[len(samples)-1]
	fmt.Fprintf(&b, "Soak: %d clients for %.0f s against a Redis with maxmemory %s (volatile-lru), flusher on, Postgres 15.\n\n",
		workers, samples[len(samples)-2].T, maxmemory)
	fmt.Fprintf(&b, "%d appends acknowledged (%d refused while Redis was full), %d events flushed, %d sessions created, %d keys evicted; the backlog drained %v after the load stopped.\n\n",
		last.Appends, last.OOMs, last.FlushedEvents, last.LiveSessions, last.Evicted, drained.Round(time.Millisecond))
	b.WriteString("| at | Redis used (MB) | bytes/session | bytes/event | backlog | lag (s) | goroutines | heap (MB) | appends/s |\n")
	b.WriteString("|---|---|---|---|---|---|---|---|---|\n")
	n := len(samples) - 1
	var prev sample
	for i, x := range samples[:n] {
		if i%max(1, n/10) != 0 && i != n-1 {
			prev = x
			continue
		}
		rate := 0.0
		if x.T > prev.T {
			rate = float64(x.Appends-prev.Appends) / (x.T - prev.T)
		}
		fmt.Fprintf(&b, "| %.0f s | %.1f | %.0f | %.0f | %d | %.2f | %d | %.1f | %.0f |\n",
			x.T, x.UsedMB, x.SessionB, x.EventB, x.Backlog, x.LagS, x.Goroutines, x.HeapMB, rate)
		prev = x
	}
	for _, c := range []struct {
		name string
		f    func(sample) float64
	}{
		{"Redis used (MB)", func(x sample) float64 { return x.UsedMB }},
		{"backlog (entries)", func(x sample) float64 { return float64(x.Backlog) }},
		{"lag (s)", func(x sample) float64 { return x.LagS }},
		{"goroutines", func(x sample) float64 { return float64(x.Goroutines) }},
		{"heap (MB)", func(x sample) float64 { return x.HeapMB }},
	} {
		mid, lastT := thirds(samples[:n], c.f)
		all := make([]float64, 0, n)
		for _, x := range samples[:n] {
			all = append(all, c.f(x))
		}
		sort.Float64s(all)
		fmt.Fprintf(&b, "\n- %s: median %.2f, max %.2f; middle third mean %.2f, last third mean %.2f", c.name,
			all[len(all)/2], all[len(all)-1], mean(mid), mean(lastT))
	}
	b.WriteString("\n")
	return b.String()
}

func soakChart(samples []sample, maxmemory string) string {
	var t, used, heap, backlog, lag, gor, evB, sessB []float64
	for _, x := range samples[:len(samples)-1] {
		t = append(t, x.T)
		used, heap = append(used, x.UsedMB), append(heap, x.HeapMB)
		backlog, lag = append(backlog, float64(x.Backlog)), append(lag, x.LagS)
		gor = append(gor, float64(x.Goroutines))
		evB, sessB = append(evB, x.EventB), append(sessB, x.SessionB/10)
	}
	return lineChart("adksession soak (maxmemory "+maxmemory+", volatile-lru)", "seconds", []panel{
		{Title: "Redis used memory and process heap", Unit: "MB", Series: []series{{"Redis used_memory", t, used}, {"Go heap live after GC", t, heap}}},
		{Title: "Redis memory per cached event, per session", Unit: "bytes", Series: []series{{"per event", t, evB}, {"per session / 10", t, sessB}}},
		{Title: "Write-behind backlog", Unit: "entries", Series: []series{{"backlog", t, backlog}}},
		{Title: "Flush lag", Unit: "s", Series: []series{{"oldest unflushed entry", t, lag}}},
		{Title: "Goroutines", Unit: "count", Series: []series{{"goroutines", t, gor}}},
	})
}

// TestTrendProblems: the soak's trend check passes a run whose goroutines
// spike at one sample (CI, a loaded machine: 68 once, against at most 50
// before) and catches one whose goroutines (by 5 a sample, as the check by
// maxima did), heap or backlog keep rising.
func TestTrendProblems(t *testing.T) {
	t.Parallel()
	run := func(f func(i int, x *sample)) []sample {
		out := make([]sample, 12)
		for i := range out {
			out[i] = sample{T: float64(i * 7), UsedMB: 20, MaxMB: 32, Goroutines: 42, HeapMB: 10, Backlog: 200, LagS: 0.5, EventB: 1200, SessionB: 4000}
			f(i, &out[i])
		}
		return out
	}
	require.Empty(t, trendProblems(run(func(int, *sample) {})))
	require.Empty(t, trendProblems(run(func(i int, x *sample) {
		if i == 10 {
			x.Goroutines = 68
		}
	})), "one spike")
	slow := trendProblems(run(func(i int, x *sample) { x.Goroutines = 40 + 5*i }))
	require.Len(t, slow, 1, "5 more goroutines a sample: 20 more over a third")
	require.Contains(t, slow[0], "goroutines")
	// The heap and the backlog have more slack (the test keeps a record of
	// every session; the backlog follows the load): what leaks there doubles.
	for name, grow := range map[string]func(i int, x *sample){
		"goroutines": func(i int, x *sample) { x.Goroutines = 40 + 20*i },
		"heap":       func(i int, x *sample) { x.HeapMB = 10 * math.Pow(2, float64(i)) },
		"backlog":    func(i int, x *sample) { x.Backlog = 200 << i },
	} {
		p := trendProblems(run(grow))
		require.Len(t, p, 1, name)
		require.Contains(t, p[0], name)
	}
}
