package integration

// Faults the write-behind must survive without losing anything
// acknowledged (docs/design.md, "Write-behind"). Each test ends with the
// database equal to what was acknowledged, row for row.

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/adksession/adksession/integration/testenv"
	"github.com/adksession/adksession/service"
)

// fleet creates n sessions spread over users (so over shards) and appends
// events to each.
func fleet(e *wbEnv, svc *service.Service, n, events int) []*service.Session {
	var out []*service.Session
	for i := range n {
		s := e.create(svc, "app", fmt.Sprint("u", i%4), fmt.Sprint("s", i), map[string]any{"i": i})
		for j := range events {
			e.mustAppend(svc, s, fmt.Sprint("inv-", j/4), fmt.Sprintf("s%d e%d", i, j),
				map[string]any{"j": j, fmt.Sprintf("user:s%d", i): j, fmt.Sprintf("app:s%d", i): j})
		}
		out = append(out, s)
	}
	return out
}

// logEntries returns every change-log entry of every shard, oldest first per shard.
func (e *wbEnv) logEntries() map[int][]redis.XMessage {
	e.t.Helper()
	out := map[int][]redis.XMessage{}
	for shard := range e.keys.Shards() {
		msgs, err := e.rdb.XRange(wbCtx(e.t), e.keys.ShardKeys(shard).Log, "-", "+").Result()
		require.NoError(e.t, err)
		if len(msgs) > 0 {
			out[shard] = msgs
		}
	}
	return out
}

func (e *wbEnv) backlog(svc *service.Service) service.Backlog {
	e.t.Helper()
	b, err := svc.Backlog(wbCtx(e.t))
	require.NoError(e.t, err)
	return b
}

// bookkeeping returns adksession's own rows, as text.
func bookkeeping(t testing.TB, e *wbEnv) []string {
	var out []string
	for _, q := range []string{
		`SELECT app_name, user_id, session_id, incarnation, rev, deleted FROM adksession_sessions ORDER BY 1, 2, 3`,
		`SELECT app_name, user_id, rev FROM adksession_states ORDER BY 1, 2`,
	} {
		queryRows(t, e.db, q, func(rows *sql.Rows) error {
			var a, b, c, d, f, g any
			cols := []any{&a, &b, &c, &d, &f, &g}
			if strings.Contains(q, "adksession_states") {
				cols = cols[:3]
			}
			if err := rows.Scan(cols...); err != nil {
				return err
			}
			out = append(out, fmt.Sprint(a, b, c, d, f, g))
			return nil
		})
	}
	return out
}

// TestFaultFlusherKilled: a flusher killed again and again mid-pass (its
// context cancelled at random points: between reads, inside the database
// transaction, between commit and acknowledgement), then replaced by
// another process's flusher once its leases expire.
func TestFaultFlusherKilled(t *testing.T) {
	t.Parallel()
	e := newWB(t, testenv.RedisURL(t), testenv.FreshDatabase(t), func(c *service.Config) {
		c.DisableFlusher = true
		c.FlushBatchSize = 3
		c.ConcurrentAppends = true
	})
	sessions := fleet(e, e.svc, 8, 15)
	start := e.backlog(e.svc).Entries
	killed := 0
	f := e.svc.NewFlusher(nil)
	for round := 0; round < 40 && e.backlog(e.svc).Entries > start/3; round++ {
		ctx, cancel := context.WithTimeout(context.Background(), time.Duration(5+rand.IntN(200))*time.Millisecond)
		for ctx.Err() == nil {
			if _, err := f.RunOnce(ctx); err != nil && ctx.Err() != nil {
				killed++
				break
			}
		}
		cancel()
		// A killed process's connections close, and Postgres ends their
		// transactions; a cancelled query's connection is closed by
		// database/sql, asynchronously.
		waitNoDBLocks(t, e)
		// Appends go on between the crashes.
		s := sessions[round%len(sessions)]
		e.mustAppend(e.svc, s, "between", fmt.Sprint("between ", round), map[string]any{"round": round})
	}
	mid := e.backlog(e.svc).Entries
	t.Logf("%d entries; %d passes killed mid-way; %d entries left", start, killed, mid)
	require.Positive(t, killed)
	require.Less(t, mid, start, "the killed flusher made progress")

	// Another process takes over once the dead flusher's leases expire.
	began := time.Now()
	cfg := e.cfg
	cfg.DisableFlusher = false
	other := e.open(cfg)
	e.flush(other)
	t.Logf("taken over and drained in %v", time.Since(began).Round(time.Millisecond))
	checkDB(t, e.db, e.model)
	require.Zero(t, e.backlog(e.svc).Entries)
}

// waitNoDBLocks waits until no transaction of the database holds an
// advisory lock (those Apply takes), or fails after 30 s.
func waitNoDBLocks(t testing.TB, e *wbEnv) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		var n int
		require.NoError(t, e.db.QueryRow(`SELECT count(*) FROM pg_locks AS l JOIN pg_stat_activity AS a ON a.pid = l.pid
WHERE l.locktype = 'advisory' AND a.datname = current_database()`).Scan(&n))
		if n == 0 {
			return
		}
		require.True(t, time.Now().Before(deadline), "%d advisory locks still held 30 s after the flusher was killed", n)
		time.Sleep(10 * time.Millisecond)
	}
}

// TestFaultPostgresDown: Postgres stopped under a steady append load (for
// as long as 100 appends take): appends never fail, every append of the
// outage waits in the change log while the flusher retries, and the backlog
// drains once Postgres is back. It waits on counts, never on durations.
func TestFaultPostgresDown(t *testing.T) {
	t.Parallel()
	pg := testenv.StartPostgres(t)
	e := newWB(t, testenv.RedisURL(t), pg.FreshDatabase(t), concurrentAppends)
	ctx := wbCtx(t)
	sessions := fleet(e, e.svc, 6, 2)
	e.flush(e.svc)

	var appended, failed atomic.Int64
	var firstErr atomic.Value
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for w := range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			tick := time.NewTicker(10 * time.Millisecond)
			defer tick.Stop()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				case <-tick.C:
				}
				s := sessions[2*w+i%2]
				if err := e.appendEv(e.svc, s, fmt.Sprint("load-", w), fmt.Sprint("load ", i),
					map[string]any{"i": i, fmt.Sprintf("user:w%d", w): i}); err != nil {
					failed.Add(1)
					firstErr.CompareAndSwap(nil, err.Error())
					continue
				}
				appended.Add(1)
			}
		}()
	}
	// appendsPast waits until n more appends are acknowledged than at, and
	// returns the count then.
	appendsPast := func(at, n int64, what string) int64 {
		t.Helper()
		deadline := time.Now().Add(time.Minute)
		for appended.Load() < at+n {
			require.True(t, time.Now().Before(deadline), "%s: %d appends acknowledged, want %d (failed: %d, %v)",
				what, appended.Load()-at, n, failed.Load(), firstErr.Load())
			time.Sleep(10 * time.Millisecond)
		}
		return appended.Load()
	}
	appendsPast(0, 30, "load before the outage")
	pg.Stop(t, "fast")
	// Nothing acknowledged from now on can reach the database: the backlog
	// holds at least every one of those appends.
	atStop := appended.Load()
	during := appendsPast(atStop, 100, "appends while Postgres is down") - atStop
	outage := e.backlog(e.svc)
	require.GreaterOrEqual(t, outage.Entries, during, "every append of the outage waits in the change log")
	deadline := time.Now().Add(time.Minute)
	for e.svc.FlusherStats().Retries == 0 {
		require.True(t, time.Now().Before(deadline), "the flusher never retried while Postgres was down")
		time.Sleep(10 * time.Millisecond)
	}
	// Reads of cached sessions are served meanwhile.
	_, err := e.svc.Get(ctx, &service.GetRequest{AppName: "app", UserID: sessions[0].UserID(), SessionID: sessions[0].ID()})
	require.NoError(t, err, "Get of a cached session while Postgres is down")
	_, createErr := e.svc.Create(ctx, &service.CreateRequest{AppName: "app", UserID: "u0", SessionID: "during-outage"})
	t.Logf("Create while Postgres is down: %v", createErr)
	if createErr == nil {
		got, err := e.svc.Get(ctx, &service.GetRequest{AppName: "app", UserID: "u0", SessionID: "during-outage"})
		require.NoError(t, err)
		e.model.created(got.Session, nil)
	}
	pg.Start(t)
	upAt := time.Now()
	appendsPast(appended.Load(), 30, "load after the outage")
	close(stop)
	wg.Wait()
	var drained time.Duration
	for {
		b := e.backlog(e.svc)
		if b.Entries == 0 {
			drained = time.Since(upAt)
			break
		}
		require.Less(t, time.Since(upAt), 2*time.Minute, "backlog not drained: %+v", b)
		time.Sleep(20 * time.Millisecond)
	}
	e.flush(e.svc)
	st := e.svc.FlusherStats()
	t.Logf("appends: %d acknowledged, %d failed, %d while Postgres was down; backlog then %d entries (lag %v); drained %v after restart; flusher: %d batches, %d retries, last error %q",
		appended.Load(), failed.Load(), during, outage.Entries, outage.Lag.Round(time.Millisecond), drained.Round(time.Millisecond), st.Batches, st.Retries, st.LastError)
	require.Zero(t, failed.Load(), "appends failed while Postgres was down: %v", firstErr.Load())
	checkDB(t, e.db, e.model)
}

// TestFaultReplay: batches replayed (the same change-log entries added
// again after they were applied and acknowledged: a flusher that died
// between commit and acknowledgement) leave the database identical.
func TestFaultReplay(t *testing.T) {
	t.Parallel()
	e := newWB(t, testenv.RedisURL(t), testenv.FreshDatabase(t), func(c *service.Config) {
		c.DisableFlusher = true
		c.FlushBatchSize = 4
	})
	ctx := wbCtx(t)
	f := e.svc.NewFlusher(nil)
	sessions := fleet(e, e.svc, 4, 6)
	e.delete(e.svc, "app", "u1", "s1")
	e.create(e.svc, "app", "u1", "s1", map[string]any{"again": true})
	e.delete(e.svc, "app", "u2", "s2")
	entries := e.logEntries()
	n := 0
	for _, msgs := range entries {
		n += len(msgs)
	}
	drain(t, f)
	rows, books := checkDB(t, e.db, e.model), bookkeeping(t, e)

	replay := func() {
		t.Helper()
		for shard, msgs := range entries {
			for _, m := range msgs {
				require.NoError(t, e.rdb.XAdd(ctx, &redis.XAddArgs{Stream: e.keys.ShardKeys(shard).Log, Values: m.Values}).Err())
			}
		}
	}
	replay()
	drain(t, f)
	require.Equal(t, rows, readDB(t, e.db), "database after a replay of %d entries", n)
	require.Equal(t, books, bookkeeping(t, e))
	replay()
	drain(t, f)
	require.Equal(t, rows, readDB(t, e.db), "database after a second replay")

	// Newer writes, then the old entries replayed once more after them.
	e.mustAppend(e.svc, sessions[0], "late", "late", map[string]any{"j": 99, "user:s0": 99, "app:s0": 99})
	e.delete(e.svc, "app", "u3", "s3")
	drain(t, f)
	replay()
	drain(t, f)
	checkDB(t, e.db, e.model)
	t.Logf("%d entries replayed three times", n)
}

// TestFaultTwoFlushers: two processes, each with its flusher, appending
// concurrently to sessions of the same users.
func TestFaultTwoFlushers(t *testing.T) {
	t.Parallel()
	e := newWB(t, testenv.RedisURL(t), testenv.FreshDatabase(t), func(c *service.Config) {
		c.ConcurrentAppends = true
		c.FlushBatchSize = 8
		c.FlushInterval = 5 * time.Millisecond
	})
	other := e.open(e.cfg)
	svcs := []*service.Service{e.svc, other}
	var sessions []*service.Session
	for i := range 8 {
		sessions = append(sessions, e.create(svcs[i%2], "app", fmt.Sprint("u", i%3), fmt.Sprint("s", i), nil))
	}
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	for w := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			svc := svcs[w%2]
			for i := range 40 {
				// Two writers per session, one through each process.
				s := sessions[(w+i)%8]
				if err := e.appendEv(svc, s, fmt.Sprint("w", w), fmt.Sprintf("w%d-%d", w, i),
					map[string]any{fmt.Sprint("w", w): i, fmt.Sprintf("user:w%d", w): i}); err != nil {
					errs <- err
					return
				}
				if i%10 == 9 {
					if err := svc.Flush(context.Background()); err != nil {
						errs <- err
						return
					}
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	e.flush(e.svc)
	e.flush(other)
	checkDB(t, e.db, e.model)
	var total, distinct int
	require.NoError(t, e.db.QueryRow(`SELECT count(*), count(DISTINCT (app_name, user_id, session_id, id)) FROM events`).Scan(&total, &distinct))
	require.Equal(t, 8*40, total)
	require.Equal(t, total, distinct)
	a, b := e.svc.FlusherStats(), other.FlusherStats()
	t.Logf("flusher 1: %d batches, %d entries; flusher 2: %d batches, %d entries", a.Batches, a.Entries, b.Batches, b.Entries)
}

// TestFaultDeadLetter: entries the database can never take (malformed
// change-log entries, an event Postgres refuses, a corrupt state value)
// go to the dead-letter list with their reason; the rest is flushed.
func TestFaultDeadLetter(t *testing.T) {
	t.Parallel()
	e := newWB(t, testenv.RedisURL(t), testenv.FreshDatabase(t), func(c *service.Config) { c.DisableFlusher = true })
	ctx := wbCtx(t)
	f := e.svc.NewFlusher(nil)
	good := fleet(e, e.svc, 3, 4)
	nul := e.create(e.svc, "app", "u9", "nul", nil)
	corrupt := e.create(e.svc, "app", "u8", "corrupt", nil)
	drain(t, f)

	// Malformed entries, in the log of a shard that has good ones too.
	shard := e.keys.Session("app", good[0].UserID(), good[0].ID()).Shard
	log := e.keys.ShardKeys(shard).Log
	e.mustAppend(e.svc, good[0], "x", "before", map[string]any{"j": 10})
	require.NoError(t, e.rdb.XAdd(ctx, &redis.XAddArgs{Stream: log, Values: []any{"k", "z", "a", "app", "u", "u0", "i", "s0"}}).Err())
	require.NoError(t, e.rdb.XAdd(ctx, &redis.XAddArgs{Stream: log, Values: []any{"k", "a", "a", "app", "u", "u0", "i", "s0", "q", "not-a-number"}}).Err())
	require.NoError(t, e.rdb.XAdd(ctx, &redis.XAddArgs{Stream: log, Values: []any{"k", "a"}}).Err())
	e.mustAppend(e.svc, good[0], "x", "after", map[string]any{"j": 11})
	// An event Postgres refuses (jsonb has no \u0000). AppendEvent refuses it, so it is put into Redis by hand,
	// as an older version wrote it.
	e.mustAppend(e.svc, nul, "x", "a", nil)
	events := e.sessionKeys("app", "u9", "nul").Events
	stored := e.rdb.ZRangeWithScores(ctx, events, 0, -1).Val()
	require.Len(t, stored, 1)
	member := stored[0].Member.(string)
	poisoned := strings.Replace(member, `"text":"a"`, `"text":"a\u0000b"`, 1)
	require.NotEqual(t, member, poisoned)
	require.NoError(t, e.rdb.ZRem(ctx, events, member).Err())
	require.NoError(t, e.rdb.ZAdd(ctx, events, redis.Z{Score: stored[0].Score, Member: poisoned}).Err())
	// A state value that is not JSON (Redis corrupted by hand).
	e.mustAppend(e.svc, corrupt, "x", "corrupt", map[string]any{"k": 1})
	require.NoError(t, e.rdb.HSet(ctx, e.sessionKeys("app", "u8", "corrupt").Session, "s:k", "{not json").Err())
	for _, s := range good[1:] {
		e.mustAppend(e.svc, s, "x", "late", map[string]any{"j": 12})
	}

	drain(t, f)
	e.model.deleted("app", "u9", "nul")
	e.model.deleted("app", "u8", "corrupt")
	rows := readDB(t, e.db)
	for _, sid := range []string{"nul", "corrupt"} {
		k := sessKey{"app", map[string]string{"nul": "u9", "corrupt": "u8"}[sid], sid}
		require.Contains(t, rows.Sessions, k, "the create of %s was flushed before", sid)
		delete(rows.Sessions, k)
	}
	// The refused event is not written; the event of the session whose row
	// is refused is (its row was flushed before: docs/design.md).
	require.Empty(t, rows.Events[sessKey{"app", "u9", "nul"}])
	require.Len(t, rows.Events[sessKey{"app", "u8", "corrupt"}], 1)
	delete(rows.Events, sessKey{"app", "u8", "corrupt"})
	// Everything else is in the database.
	m := e.model.expectedRows()
	require.Equal(t, len(m.Sessions), len(rows.Sessions))
	for k, evs := range m.Events {
		require.Len(t, rows.Events[k], len(evs), "events of %v", k)
	}

	var dead []map[string]any
	for s := range e.keys.Shards() {
		for _, v := range e.rdb.LRange(ctx, e.keys.ShardKeys(s).Dead, 0, -1).Val() {
			var d map[string]any
			require.NoError(t, json.Unmarshal([]byte(v), &d))
			dead = append(dead, d)
		}
	}
	var reasons []string
	for _, d := range dead {
		require.NotEmpty(t, d["reason"])
		require.NotEmpty(t, d["id"])
		require.NotNil(t, d["fields"])
		reasons = append(reasons, fmt.Sprint(d["reason"]))
	}
	t.Logf("dead letters: %q", reasons)
	require.Len(t, dead, 5, "3 malformed entries, the refused event, the corrupt session's event")
	b := e.backlog(e.svc)
	require.Equal(t, int64(5), b.Dead)
	require.Zero(t, b.Entries)
	require.Equal(t, int64(5), f.Stats().DeadLetters)
}
