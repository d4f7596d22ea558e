package loader

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/jmoiron/sqlx"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/adksession/adksession/cache"
	"github.com/adksession/adksession/cache/base"
	"github.com/adksession/adksession/persist"
)

// The loader's Go side on miniredis (and SQLite for the read-through):
// which cache statuses become a miss, a cold load or ErrNotFound. The
// scripts themselves are tested on real Redis (integration/).

// newMiniCache returns a Store over a fresh miniredis, its scripts loaded.
func newMiniCache(t *testing.T, durable bool) *cache.Store {
	s, _ := newMiniRedis(t, durable)
	return s
}

// newMiniRedis is newMiniCache with the client of its miniredis.
func newMiniRedis(t *testing.T, durable bool) (*cache.Store, *redis.Client) {
	t.Helper()
	m := miniredis.RunT(t)
	rdb := redis.NewClient(&redis.Options{Addr: m.Addr()})
	t.Cleanup(func() { rdb.Close() })
	s := cache.NewStore(rdb, cache.Options{Keys: miniKeys(t), Durable: durable})
	require.NoError(t, s.LoadScripts(context.Background()))
	return s, rdb
}

func miniKeys(t *testing.T) cache.Keys {
	keys, err := cache.NewKeys("unit:", 8)
	require.NoError(t, err)
	return keys
}

func TestGetRedisOnly(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c := newMiniCache(t, false)
	l := New(c, Options{CacheTTL: time.Hour, MaxCachedEvents: 10})
	require.False(t, l.Durable())

	_, err := l.Get(ctx, cache.GetArgs{SessionRef: base.SessionRef{App: "a", User: "u", ID: "none"}, After: -1})
	require.ErrorIs(t, err, base.ErrNotFound)
	require.EqualError(t, err, "adksession: not found: session none of app a, user u")

	require.NoError(t, c.Create(ctx, cache.CreateArgs{SessionRef: base.SessionRef{App: "a", User: "u", ID: "s"}, CreateTime: 1_000_000,
		Delta: cache.StateDelta{Session: []cache.Pair{{Key: "k", Value: `"v"`}}}}))
	snap, err := l.Get(ctx, cache.GetArgs{SessionRef: base.SessionRef{App: "a", User: "u", ID: "s"}, After: -1})
	require.NoError(t, err)
	require.Equal(t, map[string]string{"k": `"v"`}, snap.State)
	require.Equal(t, int64(1_000_000), snap.Incarnation)

	// Without a database nothing can be put back: op runs once, a session
	// Redis lost is not found, the other statuses come back as they are.
	calls := 0
	err = l.Run(ctx, base.SessionRef{App: "a", User: "u", ID: "s"}, func() error { calls++; return cache.ErrNotCached })
	require.EqualError(t, err, "adksession: not found: session s of app a, user u")
	require.Equal(t, 1, calls)
	calls = 0
	err = l.Run(ctx, base.SessionRef{App: "a", User: "u", ID: "s"}, func() error { calls++; return cache.ErrIncomplete })
	require.ErrorIs(t, err, cache.ErrIncomplete)
	require.Equal(t, 1, calls)
}

// TestNoDatabaseAnswersNothing: without a database the loader reads
// through noDatabase, which holds nothing: the lookups an append, a rewind
// and a fork make answer "none", a listing is Redis's, and a miss writes
// nothing to Redis (no read guard: there is nothing to put back).
func TestNoDatabaseAnswersNothing(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c, rdb := newMiniRedis(t, false)
	l := New(c, Options{CacheTTL: time.Hour, MaxCachedEvents: 10})
	ref := base.SessionRef{App: "a", User: "u", ID: "s"}
	require.NoError(t, c.Create(ctx, cache.CreateArgs{SessionRef: ref, CreateTime: 1_000_000}))
	keys, err := rdb.Keys(ctx, "*").Result()
	require.NoError(t, err)

	_, err = l.StoredEvent(ctx, ref, "e1")
	require.ErrorIs(t, err, base.ErrNotFound)
	held, err := l.HoldsEvent(ctx, ref, "e1")
	require.NoError(t, err)
	require.False(t, held)
	state, ok, err := l.CreateState(ctx, ref, 1_000_000)
	require.NoError(t, err)
	require.False(t, ok)
	require.Nil(t, state)

	listed, next, err := l.ListApp(ctx, "a", "", 10)
	require.NoError(t, err)
	require.Empty(t, next)
	require.Len(t, listed, 1)
	require.Equal(t, "s", listed[0].SID)
	require.False(t, listed[0].FromDB)

	_, err = l.Get(ctx, cache.GetArgs{SessionRef: base.SessionRef{App: "a", User: "u", ID: "none"}, After: -1})
	require.ErrorIs(t, err, base.ErrNotFound)
	after, err := rdb.Keys(ctx, "*").Result()
	require.NoError(t, err)
	require.ElementsMatch(t, keys, after)
}

// TestGetReadThrough: a session only the database holds (rows as ADK wrote
// them) is read from it and put back into Redis; one it does not hold either
// is ErrNotFound naming the session.
func TestGetReadThrough(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c := newMiniCache(t, true)
	l := New(c, Options{DB: coldDB(t), CacheTTL: time.Hour, MaxCachedEvents: 1})
	require.True(t, l.Durable())

	snap, err := l.Get(ctx, cache.GetArgs{SessionRef: base.SessionRef{App: "a", User: "u", ID: "cold"}, After: -1})
	require.NoError(t, err)
	require.Equal(t, map[string]string{"k": `"v"`}, snap.State)
	require.Equal(t, map[string]string{"x": `2`}, snap.User)
	require.Equal(t, map[string]string{"g": `1`}, snap.App)
	require.Equal(t, int64(2), snap.Rev)
	var ids []int64
	for _, e := range snap.Events {
		ids = append(ids, e.Seq)
	}
	require.Equal(t, []int64{1, 2}, ids, "the event older than the cached tail comes from the database")
	require.Equal(t, int64(2), snap.First, "MaxCachedEvents = 1: only the newest event was put back")

	// Put back: Redis now answers by itself.
	cached, err := c.Get(ctx, cache.GetArgs{SessionRef: base.SessionRef{App: "a", User: "u", ID: "cold"}, After: -1})
	require.NoError(t, err)
	require.Equal(t, int64(2), cached.Rev)
	require.Len(t, cached.Events, 1)

	_, err = l.Get(ctx, cache.GetArgs{SessionRef: base.SessionRef{App: "a", User: "u", ID: "nowhere"}, After: -1})
	require.ErrorIs(t, err, base.ErrNotFound)
	require.EqualError(t, err, "adksession: not found: session nowhere of app a, user u")
	require.False(t, errors.Is(err, cache.ErrNotCached), "a miss everywhere is not found, not a cache status")
}

// coldDB returns a SQLite store holding, as ADK wrote them, session "cold"
// of app "a", user "u" (state {"k":"v"}, events e1 and e2), the user's
// state {"x":2} and the app's state {"g":1}.
func coldDB(t *testing.T) *persist.Store {
	store, _ := coldSQL(t)
	return store
}

// coldSQL is coldDB with its SQLite handle.
func coldSQL(t *testing.T) (*persist.Store, *sql.DB) {
	t.Helper()
	ctx := context.Background()
	store, db := emptySQL(t)
	ts := func(sec int) string { return time.Unix(int64(sec), 0).UTC().Format("2006-01-02 15:04:05.000000") }
	for _, q := range []struct {
		sql  string
		args []any
	}{
		{`INSERT INTO sessions (app_name, user_id, id, state, create_time, update_time) VALUES ($1, $2, $3, $4, $5, $6)`,
			[]any{"a", "u", "cold", `{"k": "v"}`, ts(100), ts(102)}},
		{`INSERT INTO app_states (app_name, state, update_time) VALUES ($1, $2, $3)`, []any{"a", `{"g": 1}`, ts(100)}},
		{`INSERT INTO user_states (app_name, user_id, state, update_time) VALUES ($1, $2, $3, $4)`, []any{"a", "u", `{"x": 2}`, ts(100)}},
		{`INSERT INTO events (id, app_name, user_id, session_id, invocation_id, "timestamp", event_data) VALUES ($1, $2, $3, $4, $5, $6, $7)`,
			[]any{"e1", "a", "u", "cold", "i1", ts(101), `{"id":"e1","invocation_id":"i1","author":"user","timestamp":101}`}},
		{`INSERT INTO events (id, app_name, user_id, session_id, invocation_id, "timestamp", event_data) VALUES ($1, $2, $3, $4, $5, $6, $7)`,
			[]any{"e2", "a", "u", "cold", "i2", ts(102), `{"id":"e2","invocation_id":"i2","author":"model","timestamp":102}`}},
	} {
		_, err := db.ExecContext(ctx, q.sql, q.args...)
		require.NoError(t, err, q.sql)
	}
	return store, db
}

// emptySQL is a migrated SQLite database of the test's own, with its store.
func emptySQL(t *testing.T) (*persist.Store, *sql.DB) {
	t.Helper()
	ctx := context.Background()
	db, err := sql.Open("sqlite", filepath.Join(t.TempDir(), "loader.db"))
	require.NoError(t, err)
	t.Cleanup(func() { db.Close() })
	require.NoError(t, persist.MigrateDB(ctx, db, "sqlite"))
	store, err := persist.OpenDB(ctx, db, "sqlite")
	require.NoError(t, err)
	return store, db
}

// TestRunRecovers: with a database, Run puts back what the operation
// reports Redis lost (the session, the user's state, the app's state) and
// runs it again, a bounded number of times; a session the database does not
// hold either is not found, with op run once.
func TestRunRecovers(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c := newMiniCache(t, true)
	l := New(c, Options{DB: coldDB(t), CacheTTL: time.Hour, MaxCachedEvents: 10})

	calls := 0
	err := l.Run(ctx, base.SessionRef{App: "a"}, func() error {
		if calls++; calls == 1 {
			return cache.ErrAppNotCached
		}
		return nil
	})
	require.NoError(t, err)
	require.Equal(t, 2, calls)
	app, err := c.AppState(ctx, "a")
	require.NoError(t, err)
	require.Equal(t, map[string]string{"g": `1`}, app, "the app state is back in Redis")

	calls = 0
	err = l.Run(ctx, base.SessionRef{App: "a", User: "u", ID: "cold"}, func() error {
		if calls++; calls == 1 {
			return cache.ErrNotCached
		}
		return nil
	})
	require.NoError(t, err)
	require.Equal(t, 2, calls)
	snap, err := c.Get(ctx, cache.GetArgs{SessionRef: base.SessionRef{App: "a", User: "u", ID: "cold"}, After: -1})
	require.NoError(t, err, "the session is back in Redis")
	require.Equal(t, int64(2), snap.Rev)
	user, ok, err := c.UserState(ctx, "a", "u")
	require.NoError(t, err)
	require.True(t, ok, "the user's state came back with the session")
	require.Equal(t, map[string]string{"x": `2`}, user)

	calls = 0
	err = l.Run(ctx, base.SessionRef{App: "a", User: "u", ID: "cold"}, func() error { calls++; return cache.ErrIncomplete })
	require.ErrorIs(t, err, cache.ErrIncomplete, "lost again after every put-back: the status comes back")
	require.Equal(t, 1+maxRecoveries, calls)

	calls = 0
	err = l.Run(ctx, base.SessionRef{App: "a", User: "u", ID: "nowhere"}, func() error { calls++; return cache.ErrNotCached })
	require.EqualError(t, err, "adksession: not found: session nowhere of app a, user u")
	require.Equal(t, 1, calls)
}

// movingDB is the database of coldDB whose reads of a session or of a
// user's state each let a flush land while they run: the first moves of
// each kind move the read's guard, as a flusher's pass does. reads counts
// the reads of each kind.
type movingDB struct {
	Database
	keys  cache.Keys
	rdb   *redis.Client
	moves int
	mu    sync.Mutex // the session's read and the user's run at once
	reads map[string]int
}

func (d *movingDB) move(ctx context.Context, kind, app, user, sid string) error {
	d.mu.Lock()
	d.reads[kind]++
	n := d.reads[kind]
	d.mu.Unlock()
	if n > d.moves {
		return nil
	}
	return d.rdb.HIncrBy(ctx, d.keys.ShardKeys(d.keys.Shard(app, user)).Guards, cache.GuardField(base.SessionRef{App: app, User: user, ID: sid}), 1).Err()
}

func (d *movingDB) LoadSessionEvents(ctx context.Context, key base.SessionRef, w persist.Window, prepare persist.Prepare) (*persist.LoadedSession, error) {
	s, err := d.Database.LoadSessionEvents(ctx, key, w, prepare)
	if err == nil {
		err = d.move(ctx, "session", key.App, key.User, key.ID)
	}
	return s, err
}

func (d *movingDB) LoadUserState(ctx context.Context, app, user string) (map[string]json.RawMessage, persist.StateVersion, error) {
	st, v, err := d.Database.LoadUserState(ctx, app, user)
	if err == nil {
		err = d.move(ctx, "user", app, user, "")
	}
	return st, v, err
}

// TestColdReadAgainWhenGuardMoves: a cold read whose guard a flush moved
// while it read the database puts nothing back and reads again (the
// session's read and the user's state's each), up to maxGuardedReads
// times; what it answers and leaves in Redis is the last read's.
func TestColdReadAgainWhenGuardMoves(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	get := cache.GetArgs{SessionRef: base.SessionRef{App: "a", User: "u", ID: "cold"}, After: -1}

	c, rdb := newMiniRedis(t, true)
	db := &movingDB{Database: coldDB(t), keys: miniKeys(t), rdb: rdb, moves: 2, reads: map[string]int{}}
	snap, err := New(c, Options{DB: db, CacheTTL: time.Hour, MaxCachedEvents: 10}).Get(ctx, get)
	require.NoError(t, err)
	require.Equal(t, map[string]int{"session": 3, "user": 3}, db.reads, "two reads outdated by a flush, then one that counts")
	require.Equal(t, int64(2), snap.Rev)
	require.Len(t, snap.Events, 2)
	require.Equal(t, map[string]string{"x": `2`}, snap.User)
	cached, err := c.Get(ctx, get)
	require.NoError(t, err, "the third read is back in Redis")
	require.Len(t, cached.Events, 2)
	user, ok, err := c.UserState(ctx, "a", "u")
	require.NoError(t, err)
	require.True(t, ok, "the user's third read is back in Redis")
	require.Equal(t, map[string]string{"x": `2`}, user)

	c, rdb = newMiniRedis(t, true)
	db = &movingDB{Database: coldDB(t), keys: miniKeys(t), rdb: rdb, moves: maxGuardedReads, reads: map[string]int{}}
	_, err = New(c, Options{DB: db, CacheTTL: time.Hour, MaxCachedEvents: 10}).Get(ctx, get)
	require.ErrorIs(t, err, cache.ErrReadOutdated, "every read outdated")
	require.Equal(t, maxGuardedReads, db.reads["session"], "the session's reads are bounded")
	_, err = c.Get(ctx, get)
	require.ErrorIs(t, err, cache.ErrNotCached, "no outdated read of the session was put back")
}

// TestStoredEvent: the reads an append, a rewind and a fork make of the
// database through the loader: an event by id in the form Redis keeps, and
// the state a session was created with; without a database, none.
func TestStoredEvent(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	cold := base.SessionRef{App: "a", User: "u", ID: "cold"}
	l := New(newMiniCache(t, true), Options{DB: coldDB(t), CacheTTL: time.Hour, MaxCachedEvents: 10})

	rec, err := l.StoredEvent(ctx, cold, "e2")
	require.NoError(t, err)
	require.Equal(t, "e2", rec.ID)
	require.Equal(t, time.Unix(102, 0).UnixMicro(), rec.Ts)
	var ev map[string]any
	require.NoError(t, json.Unmarshal([]byte(rec.JSON), &ev))
	require.Equal(t, map[string]any{"id": "e2", "invocationId": "i2", "author": "model", "timestamp": 102.0},
		ev, "the API form (invocationId), with the row's id, invocation and time")
	_, err = l.StoredEvent(ctx, cold, "e9")
	require.ErrorIs(t, err, base.ErrNotFound)
	_, err = l.StoredEvent(ctx, base.SessionRef{App: "a", User: "other", ID: "cold"}, "e2")
	require.ErrorIs(t, err, base.ErrNotFound, "another user's session of the same id")

	held, err := l.HoldsEvent(ctx, cold, "e1")
	require.NoError(t, err)
	require.True(t, held)
	held, err = l.HoldsEvent(ctx, cold, "e9")
	require.NoError(t, err)
	require.False(t, held)

	_, ok, err := l.CreateState(ctx, cold, 1)
	require.NoError(t, err)
	require.False(t, ok, "a session ADK wrote has no create-time state on record")

	bare := New(newMiniCache(t, false), Options{})
	_, err = bare.StoredEvent(ctx, cold, "e2")
	require.ErrorIs(t, err, base.ErrNotFound, "no database: Redis is the only copy")
	held, err = bare.HoldsEvent(ctx, cold, "e2")
	require.NoError(t, err)
	require.False(t, held)
	_, ok, err = bare.CreateState(ctx, cold, 1)
	require.NoError(t, err)
	require.False(t, ok)
}

// TestPruneProtocol runs the prune's protocol on miniredis and SQLite, no
// server: of two idle sessions ADK wrote (the coldDB's, and another user's
// only session), the one whose row changes while it is fenced is kept and
// its fence lifted; the other goes from the database with its user's state,
// and its read guard moves, so that a cold read begun before the delete
// puts nothing back.
func TestPruneProtocol(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	store, db := coldSQL(t)
	ts := func(sec int) string { return time.Unix(int64(sec), 0).UTC().Format("2006-01-02 15:04:05.000000") }
	for _, q := range []string{
		`INSERT INTO sessions (app_name, user_id, id, state, create_time, update_time) VALUES ('a', 'v', 'idle', '{}', '` + ts(100) + `', '` + ts(100) + `')`,
		`INSERT INTO user_states (app_name, user_id, state, update_time) VALUES ('a', 'v', '{"y": 1}', '` + ts(100) + `')`,
	} {
		_, err := db.ExecContext(ctx, q)
		require.NoError(t, err, q)
	}
	c, rdb := newMiniRedis(t, true)
	l := New(c, Options{DB: store, Prune: store, CacheTTL: time.Hour, MaxCachedEvents: 10})
	idle := base.SessionRef{App: "a", User: "v", ID: "idle"}
	guard, err := c.ReadGuard(ctx, idle)
	require.NoError(t, err)

	var stages []PruneStage
	var deleted [2]int64
	tally, err := l.Prune(ctx, PruneArgs{Cutoff: time.Unix(1000, 0), BatchSize: 10, TombstoneMargin: time.Hour,
		Deleted: func(sessions, events int64) { deleted[0] += sessions; deleted[1] += events },
		Stage: func(st PruneStage) {
			stages = append(stages, st)
			if st == PruneFenced { // an append lands on "cold" while it is fenced
				_, err := db.ExecContext(ctx, `UPDATE sessions SET update_time = $1 WHERE id = 'cold'`, ts(500))
				require.NoError(t, err)
			}
		}})
	require.NoError(t, err)
	require.Equal(t, []PruneStage{PruneRead, PruneFenced}, stages, "one batch")
	require.Equal(t, PruneTally{Sessions: 1, Bytes: 2, UserStates: 1, Kept: 1, Batches: 1}, tally, "the bytes of its state {}")
	require.Equal(t, [2]int64{1, 0}, deleted, "the deletions told as they happen")

	var sessions []string
	require.NoError(t, sqlx.SelectContext(ctx, sqlx.NewDb(db, "sqlite"), &sessions, `SELECT id FROM sessions ORDER BY id`))
	require.Equal(t, []string{"cold"}, sessions, "the idle session is gone, the changed one kept")
	var users []string
	require.NoError(t, sqlx.SelectContext(ctx, sqlx.NewDb(db, "sqlite"), &users, `SELECT user_id FROM user_states ORDER BY user_id`))
	require.Equal(t, []string{"u"}, users, "v's state went with v's last session")
	fences, err := rdb.Keys(ctx, "*").Result()
	require.NoError(t, err)
	for _, k := range fences {
		require.NotContains(t, k, ":s:a:u:cold", "the kept session's fence is lifted: %v", fences)
	}
	snap, err := l.Get(ctx, cache.GetArgs{SessionRef: base.SessionRef{App: "a", User: "u", ID: "cold"}, After: -1})
	require.NoError(t, err, "the kept session reads")
	require.Equal(t, int64(2), snap.Rev)
	wrote, err := c.Hydrate(ctx, cache.HydrateArgs{SessionRef: idle, Guard: guard}, time.Hour)
	require.NoError(t, err)
	require.False(t, wrote, "the deleted session's fence stands for the read")
	require.NoError(t, rdb.Del(ctx, miniKeys(t).Session(idle.App, idle.User, idle.ID).Session).Err(), "the fence expires")
	_, err = c.Hydrate(ctx, cache.HydrateArgs{SessionRef: idle, Guard: guard}, time.Hour)
	require.ErrorIs(t, err, cache.ErrReadOutdated, "a read of the deleted session begun before the delete puts nothing back")
}
