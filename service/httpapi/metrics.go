package httpapi

import (
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// metrics are the collectors of one handler.
type metrics struct {
	requests      *prometheus.CounterVec   // route, code
	latency       *prometheus.HistogramVec // route
	errors        *prometheus.CounterVec   // route, kind
	appends       prometheus.Counter
	appendLatency prometheus.Histogram
	getLatency    *prometheus.HistogramVec // window: full | windowed | compacted
	appendRate    *rateCounter
	// appendWindow and appendCount feed the dashboard's history:
	// appendLatency and appends record into them too.
	appendWindow *latencyWindow
	appendCount  *atomic.Int64
}

// latencyBuckets span 100µs to 10s.
var latencyBuckets = prometheus.ExponentialBuckets(0.0001, 2.5, 12)

func newMetrics(reg prometheus.Registerer) *metrics {
	window, count := &latencyWindow{}, &atomic.Int64{}
	m := &metrics{appendWindow: window, appendCount: count,
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "adksession_http_requests_total", Help: "HTTP API requests by route and status code.",
		}, []string{"route", "code"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "adksession_http_request_duration_seconds", Help: "HTTP API request latency by route.", Buckets: latencyBuckets,
		}, []string{"route"}),
		errors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "adksession_errors_total",
			Help: "Failed requests by route and kind (invalid, not_found, already_exists, stale, too_large, unauthorized, redis, timeout, canceled, internal).",
		}, []string{"route", "kind"}),
		appends: countingCounter{prometheus.NewCounter(prometheus.CounterOpts{
			Name: "adksession_appends_total", Help: "Events appended through the HTTP API.",
		}), count},
		appendLatency: windowedHistogram{prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "adksession_append_duration_seconds", Help: "Latency of one AppendEvent (one Redis script).", Buckets: latencyBuckets,
		}), window},
		getLatency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "adksession_get_duration_seconds", Help: "Latency of Get, by window (full, windowed or compacted).", Buckets: latencyBuckets,
		}, []string{"window"}),
		appendRate: newRateCounter(10),
	}
	reg.MustRegister(m.requests, m.latency, m.errors, m.appends, m.appendLatency, m.getLatency)
	return m
}

func (m *metrics) handler(g prometheus.Gatherer) http.Handler {
	return promhttp.HandlerFor(g, promhttp.HandlerOpts{})
}

// rateCounter counts events per second over the last `window` whole
// seconds, for the dashboard's appends/s.
type rateCounter struct {
	mu      sync.Mutex
	window  int64
	buckets []int64 // count per second, indexed by unix second mod len
	stamps  []int64 // the unix second each bucket counts
}

func newRateCounter(window int) *rateCounter {
	n := window + 1
	return &rateCounter{window: int64(window), buckets: make([]int64, n), stamps: make([]int64, n)}
}

func (c *rateCounter) add(now time.Time) {
	sec := now.Unix()
	i := sec % int64(len(c.buckets))
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.stamps[i] != sec {
		c.stamps[i], c.buckets[i] = sec, 0
	}
	c.buckets[i]++
}

// perSecond is the mean rate over the last whole seconds before now.
func (c *rateCounter) perSecond(now time.Time) float64 {
	sec := now.Unix()
	c.mu.Lock()
	defer c.mu.Unlock()
	var sum int64
	for i, st := range c.stamps {
		if st < sec && st >= sec-c.window {
			sum += c.buckets[i]
		}
	}
	return float64(sum) / float64(c.window)
}
