package persist

import (
	"context"
	"testing"
)

// BenchmarkApply applies batches of 500 new events over 50 sessions (10
// each), with the sessions' snapshots and bookkeeping.
func BenchmarkApply(b *testing.B) {
	for _, be := range backends {
		b.Run(be.name, func(b *testing.B) {
			s := migrated(b, be)
			ctx := context.Background()
			b.ReportAllocs()
			var round int64
			for b.Loop() {
				if err := s.Apply(ctx, bigBatch(round)); err != nil {
					b.Fatal(err)
				}
				round++
			}
			b.ReportMetric(float64(round*500)/b.Elapsed().Seconds(), "events/s")
		})
	}
}

// BenchmarkLoadSession1000 is a cold load of a whole 1000-event session.
func BenchmarkLoadSession1000(b *testing.B) {
	for _, be := range backends {
		b.Run(be.name, func(b *testing.B) {
			s := migrated(b, be)
			ctx := context.Background()
			k := skey("s1")
			session1000(b, s, k)
			b.ReportAllocs()
			for b.Loop() {
				ls, err := s.LoadSession(ctx, k, Window{})
				if err != nil || len(ls.Events) != 1000 {
					b.Fatalf("LoadSession: %d events, %v", len(ls.Events), err)
				}
			}
		})
	}
}
