package httpapi

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/stretchr/testify/require"

	"github.com/adksession/adksession/service"
)

// TestHistory samples by hand (no clock, no sleeps): appends/s is the
// appends between two samples over their distance; p50 and p99 are the
// latencies observed in between (null when there were none); the flush
// numbers come from FlushStats (null when it fails); the ring keeps the
// last 15 minutes, oldest first; GET /api/dashboard/history answers it.
func TestHistory(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	svc, err := service.Open(ctx, service.Config{RedisURL: "redis://" + miniredis.RunT(t).Addr() + "/0"})
	require.NoError(t, err)
	defer svc.Close(ctx)
	backlog, fail := int64(7), false
	h := New(svc, Options{HistoryInterval: -1, FlushStats: func(context.Context) (FlushStats, error) {
		if fail {
			return FlushStats{}, context.DeadlineExceeded
		}
		backlog++
		return FlushStats{Lag: 1500 * time.Millisecond, Backlog: backlog, DeadLetters: 2}, nil
	}})
	defer h.Close()
	require.Nil(t, h.history, "HistoryInterval < 0: no history")
	hs := newHistory(h, 5*time.Second)
	h.history = hs
	t0 := time.Unix(1_700_000_000, 0)

	hs.sample(context.Background(), t0)
	for i := 1; i <= 100; i++ { // 100 appends of 1..100 ms
		h.metrics.appends.Inc()
		h.metrics.appendLatency.Observe(float64(i) / 1000)
	}
	hs.sample(context.Background(), t0.Add(5*time.Second))
	fail = true
	hs.sample(context.Background(), t0.Add(10*time.Second))

	got := hs.list()
	require.Len(t, got, 3)
	require.Equal(t, 0.0, got[0].AppendsPerSecond)
	require.Nil(t, got[0].AppendP50)
	require.Equal(t, 20.0, got[1].AppendsPerSecond, "100 appends in 5 s")
	require.Equal(t, 0.050, *got[1].AppendP50)
	require.Equal(t, 0.099, *got[1].AppendP99)
	require.Equal(t, [3]any{1.5, int64(9), int64(2)}, [3]any{*got[1].FlushLag, *got[1].Backlog, *got[1].DeadLetters})
	require.Nil(t, got[2].AppendP50, "no append in the third interval")
	require.Nil(t, got[2].Backlog, "FlushStats failed")
	require.Equal(t, 0.0, got[2].AppendsPerSecond)

	// The ring keeps 15 minutes: 180 samples at 5 s, the oldest dropped.
	for i := 3; i < 200; i++ {
		hs.sample(context.Background(), t0.Add(time.Duration(i)*5*time.Second))
	}
	got = hs.list()
	require.Len(t, got, 180)
	require.Equal(t, float64(t0.Add(20*5*time.Second).Unix()), got[0].Time)
	require.Equal(t, float64(t0.Add(199*5*time.Second).Unix()), got[179].Time)

	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("GET", "/api/dashboard/history", nil))
	require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
	var body struct {
		IntervalSeconds, WindowSeconds float64
		Samples                        []sampleJSON
	}
	require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &body))
	require.Equal(t, [2]float64{5, 900}, [2]float64{body.IntervalSeconds, body.WindowSeconds})
	require.Equal(t, got, body.Samples)
}

// TestHistorySamplesInBackground: with an interval the handler samples on
// its own (the first sample at once) until Close, which waits for the
// sampler to end.
func TestHistorySamplesInBackground(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	mr := miniredis.RunT(t)
	svc, err := service.Open(ctx, service.Config{RedisURL: "redis://" + mr.Addr() + "/0"})
	require.NoError(t, err)
	defer svc.Close(ctx)
	h := New(svc, Options{HistoryInterval: 10 * time.Millisecond})
	require.Eventually(t, func() bool { return len(h.history.list()) >= 3 }, 10*time.Second, 5*time.Millisecond)
	h.Close()
	h.Close() // twice is fine
}
