package integration

import (
	"context"
	"fmt"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/adksession/adksession/cache"
	"github.com/adksession/adksession/integration/testenv"
	"github.com/adksession/adksession/service"
)

func TestIdleFlusherWakesUpStandalone(t *testing.T) {
	t.Parallel()
	testIdleFlusherWakesUp(t, testenv.RedisURL(t))
}

func TestIdleFlusherWakesUpCluster(t *testing.T) {
	t.Parallel()
	testIdleFlusherWakesUp(t, testenv.ClusterURL(t))
}

// testIdleFlusherWakesUp: an idle flusher whose safety poll is an hour away
// flushes what another process (without a flusher) appends, at once: the
// script's publish on the wake channel woke it.
func testIdleFlusherWakesUp(t *testing.T, url string) {
	e := newWB(t, url, testenv.FreshDatabase(t), func(c *service.Config) { c.FlushInterval = time.Hour })
	writer := e.cfg
	writer.DisableFlusher = true
	other := e.open(writer)
	for round := range 3 {
		sid := fmt.Sprint("s", round)
		sess := e.create(other, "app", fmt.Sprint("u", round), sid, map[string]any{"round": round})
		e.mustAppend(other, sess, "inv", "hello", map[string]any{"n": round})
		waitUntil(t, 30*time.Second, "the idle flusher to write round "+sid, func() bool {
			var n int
			require.NoError(t, e.db.QueryRow(`SELECT count(*) FROM events WHERE session_id = $1`, sid).Scan(&n))
			return n == 1
		})
	}
	// Nothing polled: the writes above were all the flusher had to do.
	require.Zero(t, e.svc.FlusherStats().Retries)
}

var commandsRE = regexp.MustCompile(`total_commands_processed:(\d+)`)

// BenchmarkIdleProcesses: 20 idle processes (Services with a database and
// their flushers, default settings) on a Redis of their own; reports the
// commands per second each costs Redis (INFO stats, over 40 s).
func BenchmarkIdleProcesses(b *testing.B) {
	srv := testenv.StartRedis(b)
	dbURL := testenv.FreshDatabase(b)
	ctx := context.Background()
	require.NoError(b, service.Migrate(ctx, dbURL))
	const processes = 20
	for range processes {
		svc, err := service.Open(ctx, service.Config{RedisURL: srv.URL, DatabaseURL: dbURL})
		require.NoError(b, err)
		defer svc.Close(ctx)
	}
	rdb, err := cache.NewClient(srv.URL)
	require.NoError(b, err)
	defer rdb.Close()
	count := func() int64 {
		info, err := rdb.Info(ctx, "stats").Result()
		require.NoError(b, err)
		n, _ := strconv.ParseInt(commandsRE.FindStringSubmatch(info)[1], 10, 64)
		return n
	}
	const window = 40 * time.Second
	for b.Loop() {
		before := count()
		time.Sleep(window)   // the measurement is what an idle process does in this time
		after := count() - 1 // the INFO of the first reading
		b.ReportMetric(float64(after-before)/window.Seconds()/processes, "cmds/s/process")
	}
}

// TestRecentBacklog: with no flusher reporting, the backlog is read from
// the shards; once a flusher has drained them, from what it reported.
func TestRecentBacklog(t *testing.T) {
	t.Parallel()
	e := newWB(t, testenv.RedisURL(t), testenv.FreshDatabase(t), func(c *service.Config) { c.DisableFlusher = true })
	ctx := wbCtx(t)
	sess := e.create(e.svc, "app", "u", "s", nil)
	e.mustAppend(e.svc, sess, "inv", "a", nil)
	e.mustAppend(e.svc, sess, "inv", "b", nil)
	b, err := e.svc.RecentBacklog(ctx)
	require.NoError(t, err)
	require.EqualValues(t, 3, b.Entries, "the create and two appends, read from the shards")
	require.Positive(t, b.Lag)

	cfg := e.cfg
	cfg.DisableFlusher = false
	flusher := e.open(cfg)
	e.flush(flusher)
	waitUntil(t, 30*time.Second, "the flusher to report an empty backlog", func() bool {
		h := e.hash(e.keys.Stats())
		return h["backlog"] == "0" && h["updated_ms"] != ""
	})
	b, err = e.svc.RecentBacklog(ctx)
	require.NoError(t, err)
	require.Zero(t, b.Entries)
	require.Zero(t, b.Lag)
}
