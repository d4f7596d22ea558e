package service

import (
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// pruneStats count what this process's prunes did (dry runs excluded), for
// Metrics.
type pruneStats struct {
	runs, errors, sessions, events, userStates, appStates, tombstones atomic.Int64
	lastSuccess                                                       atomic.Int64 // unix ms
}

// add counts a batch's deletions as they happen, so a long prune shows.
func (p *pruneStats) add(sessions, events int64) {
	p.sessions.Add(sessions)
	p.events.Add(events)
}

// record counts a finished run (its sessions and events were added batch
// by batch).
func (p *pruneStats) record(sum *PruneSummary, err error) {
	if sum.DryRun {
		return
	}
	p.runs.Add(1)
	p.userStates.Add(sum.UserStates)
	p.appStates.Add(sum.AppStates)
	p.tombstones.Add(sum.Tombstones)
	if err != nil {
		p.errors.Add(1)
		return
	}
	p.lastSuccess.Store(time.Now().UnixMilli())
}

var (
	pruneRunsDesc     = prometheus.NewDesc("adksession_prune_runs_total", "Prunes this process ran (dry runs excluded).", nil, nil)
	pruneErrorsDesc   = prometheus.NewDesc("adksession_prune_errors_total", "Prunes of this process that ended with an error.", nil, nil)
	pruneSessionsDesc = prometheus.NewDesc("adksession_prune_sessions_total", "Idle sessions this process's prunes deleted.", nil, nil)
	pruneEventsDesc   = prometheus.NewDesc("adksession_prune_events_total", "Events of the sessions this process's prunes deleted.", nil, nil)
	pruneStatesDesc   = prometheus.NewDesc("adksession_prune_states_total", "State rows this process's prunes deleted, by scope (user, app).", []string{"scope"}, nil)
	pruneTombsDesc    = prometheus.NewDesc("adksession_prune_tombstones_total", "Bookkeeping tombstones this process's prunes purged.", nil, nil)
	pruneLastDesc     = prometheus.NewDesc("adksession_prune_last_success_timestamp_seconds", "When a prune of this process last ended without error (0: never).", nil, nil)
)

var pruneDescs = []*prometheus.Desc{pruneRunsDesc, pruneErrorsDesc, pruneSessionsDesc, pruneEventsDesc, pruneStatesDesc, pruneTombsDesc, pruneLastDesc}

func (p *pruneStats) collect(ch chan<- prometheus.Metric) {
	for _, m := range []struct {
		d *prometheus.Desc
		v *atomic.Int64
	}{{pruneRunsDesc, &p.runs}, {pruneErrorsDesc, &p.errors}, {pruneSessionsDesc, &p.sessions}, {pruneEventsDesc, &p.events}, {pruneTombsDesc, &p.tombstones}} {
		ch <- prometheus.MustNewConstMetric(m.d, prometheus.CounterValue, float64(m.v.Load()))
	}
	ch <- prometheus.MustNewConstMetric(pruneStatesDesc, prometheus.CounterValue, float64(p.userStates.Load()), "user")
	ch <- prometheus.MustNewConstMetric(pruneStatesDesc, prometheus.CounterValue, float64(p.appStates.Load()), "app")
	ch <- prometheus.MustNewConstMetric(pruneLastDesc, prometheus.GaugeValue, float64(p.lastSuccess.Load())/1000)
}
