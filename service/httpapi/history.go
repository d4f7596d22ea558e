package httpapi

import (
	"context"
	"math/rand/v2"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/adksession/adksession/cache/base/startstop"
	"github.com/prometheus/client_golang/prometheus"
)

// The dashboard's history: every Options.HistoryInterval (5 s) the handler
// samples appends/s and append latency (through this server), flush lag,
// backlog, dead letters and Redis memory into a ring that holds the last
// 15 minutes, in memory. GET /api/dashboard/history answers it; the page
// draws it.

// historyWindow is how far back the history goes.
const historyWindow = 15 * time.Minute

// sampleJSON is one point of the history. A value is null when it could
// not be read (no database, Redis down) or, for latencies, when no append
// went through this server in the interval.
type sampleJSON struct {
	Time             float64  `json:"time"` // epoch seconds
	AppendsPerSecond float64  `json:"appendsPerSecond"`
	AppendP50        *float64 `json:"appendP50Seconds"`
	AppendP99        *float64 `json:"appendP99Seconds"`
	FlushLag         *float64 `json:"flushLagSeconds"`
	Backlog          *int64   `json:"backlog"`
	DeadLetters      *int64   `json:"deadLetters"`
	RedisMemory      *int64   `json:"redisUsedMemory"`
}

// history samples the handler's numbers into a ring.
type history struct {
	h        *Handler
	interval time.Duration

	mu     sync.Mutex
	ring   []sampleJSON
	next   int // where the next sample goes
	full   bool
	lastAt time.Time
	lastN  int64
	life   startstop.Base
}

func newHistory(h *Handler, interval time.Duration) *history {
	n := int(historyWindow / interval)
	return &history{h: h, interval: interval, ring: make([]sampleJSON, max(n, 1))}
}

// start samples now and then every interval until close.
func (hs *history) start() {
	hs.life.Start(context.Background(), func(ctx context.Context) {
		t := time.NewTicker(hs.interval)
		defer t.Stop()
		for {
			hs.sample(ctx, time.Now())
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
	})
}

func (hs *history) close() { hs.life.Stop() }

// sample takes one point at now.
func (hs *history) sample(ctx context.Context, now time.Time) {
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	m := hs.h.metrics
	s := sampleJSON{Time: float64(now.UnixMicro()) / 1e6}
	if p50, p99, ok := m.appendWindow.take(); ok {
		s.AppendP50, s.AppendP99 = &p50, &p99
	}
	if f := hs.h.opt.FlushStats; f != nil {
		if st, err := f(ctx); err == nil {
			lag := st.Lag.Seconds()
			s.FlushLag, s.Backlog, s.DeadLetters = &lag, &st.Backlog, &st.DeadLetters
		}
	}
	if r, err := hs.h.readRedisMemory(ctx); err == nil && r.Error == "" {
		s.RedisMemory = &r.UsedMemory
	}
	n := m.appendCount.Load()
	hs.mu.Lock()
	defer hs.mu.Unlock()
	if !hs.lastAt.IsZero() && now.After(hs.lastAt) {
		s.AppendsPerSecond = float64(n-hs.lastN) / now.Sub(hs.lastAt).Seconds()
	}
	hs.lastAt, hs.lastN = now, n
	hs.ring[hs.next] = s
	hs.next = (hs.next + 1) % len(hs.ring)
	hs.full = hs.full || hs.next == 0
}

// list returns the samples, oldest first.
func (hs *history) list() []sampleJSON {
	hs.mu.Lock()
	defer hs.mu.Unlock()
	if !hs.full {
		return slices.Clone(hs.ring[:hs.next])
	}
	return append(slices.Clone(hs.ring[hs.next:]), hs.ring[:hs.next]...)
}

// dashboardHistory: GET /api/dashboard/history, the last 15 minutes.
func (h *Handler) dashboardHistory(w http.ResponseWriter, r *http.Request) error {
	out := struct {
		IntervalSeconds float64      `json:"intervalSeconds"`
		WindowSeconds   float64      `json:"windowSeconds"`
		Samples         []sampleJSON `json:"samples"`
	}{WindowSeconds: historyWindow.Seconds(), Samples: []sampleJSON{}}
	if h.history != nil {
		out.IntervalSeconds = h.history.interval.Seconds()
		out.Samples = h.history.list()
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

// latencyWindow keeps a uniform sample (reservoir) of the latencies
// observed since it was last taken, for percentiles per interval.
type latencyWindow struct {
	mu   sync.Mutex
	vals []float64
	seen int
}

// latencyReservoir bounds the latencies kept per interval.
const latencyReservoir = 4096

func (w *latencyWindow) observe(v float64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.seen++
	if len(w.vals) < latencyReservoir {
		w.vals = append(w.vals, v)
		return
	}
	if i := rand.IntN(w.seen); i < latencyReservoir {
		w.vals[i] = v
	}
}

// take returns the median and 99th percentile of what was observed since
// the last take (ok false when nothing was), and starts over.
func (w *latencyWindow) take() (p50, p99 float64, ok bool) {
	w.mu.Lock()
	vals := w.vals
	w.vals, w.seen = nil, 0
	w.mu.Unlock()
	if len(vals) == 0 {
		return 0, 0, false
	}
	slices.Sort(vals)
	return percentile(vals, 0.50), percentile(vals, 0.99), true
}

// percentile of sorted values, nearest rank.
func percentile(sorted []float64, p float64) float64 {
	i := int(p*float64(len(sorted))+0.999999) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}

// windowedHistogram is a histogram that also feeds a latencyWindow.
type windowedHistogram struct {
	prometheus.Histogram
	window *latencyWindow
}

func (h windowedHistogram) Observe(v float64) {
	h.Histogram.Observe(v)
	h.window.observe(v)
}

// countingCounter is a counter whose count the history reads.
type countingCounter struct {
	prometheus.Counter
	n *atomic.Int64
}

func (c countingCounter) Inc() {
	c.Counter.Inc()
	c.n.Add(1)
}
