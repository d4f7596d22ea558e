package service

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Metrics returns a Prometheus collector of the write-behind: flush lag
// (age of the oldest unflushed change), backlog, dead letters (read from
// Redis at each scrape, so they cover every flusher), and this process's
// flusher counters, and what this process's prunes deleted. Register it
// with a prometheus.Registerer.
func (s *Service) Metrics() prometheus.Collector { return &collector{s: s} }

var (
	lagDesc      = prometheus.NewDesc("adksession_flush_lag_seconds", "Age of the oldest change not yet in the database.", nil, nil)
	backlogDesc  = prometheus.NewDesc("adksession_flush_backlog", "Change-log entries not yet in the database.", nil, nil)
	deadDesc     = prometheus.NewDesc("adksession_flush_dead_letters", "Change-log entries the database rejected for good.", nil, nil)
	batchesDesc  = prometheus.NewDesc("adksession_flush_batches_total", "Batches this process's flusher committed.", nil, nil)
	entriesDesc  = prometheus.NewDesc("adksession_flush_entries_total", "Change-log entries this process's flusher committed.", nil, nil)
	eventsDesc   = prometheus.NewDesc("adksession_flush_events_total", "Events this process's flusher wrote.", nil, nil)
	retriesDesc  = prometheus.NewDesc("adksession_flush_retries_total", "Flusher passes that failed and were retried.", nil, nil)
	rejectedDesc = prometheus.NewDesc("adksession_flush_dead_lettered_total", "Entries this process's flusher dead-lettered.", nil, nil)
	redisErrDesc = prometheus.NewDesc("adksession_redis_up", "1 when Redis answered the last scrape.", nil, nil)
)

type collector struct{ s *Service }

func (c *collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{lagDesc, backlogDesc, deadDesc, batchesDesc, entriesDesc, eventsDesc, retriesDesc, rejectedDesc, redisErrDesc} {
		ch <- d
	}
	for _, d := range pruneDescs {
		ch <- d
	}
}

func (c *collector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	up := 1.0
	if b, err := c.s.Backlog(ctx); err != nil {
		up = 0
	} else {
		ch <- prometheus.MustNewConstMetric(lagDesc, prometheus.GaugeValue, b.Lag.Seconds())
		ch <- prometheus.MustNewConstMetric(backlogDesc, prometheus.GaugeValue, float64(b.Entries))
		ch <- prometheus.MustNewConstMetric(deadDesc, prometheus.GaugeValue, float64(b.Dead))
	}
	ch <- prometheus.MustNewConstMetric(redisErrDesc, prometheus.GaugeValue, up)
	st := c.s.FlusherStats()
	for _, m := range []struct {
		d *prometheus.Desc
		v int64
	}{{batchesDesc, st.Batches}, {entriesDesc, st.Entries}, {eventsDesc, st.Events}, {retriesDesc, st.Retries}, {rejectedDesc, st.DeadLetters}} {
		ch <- prometheus.MustNewConstMetric(m.d, prometheus.CounterValue, float64(m.v))
	}
	c.s.prunes.collect(ch)
}
