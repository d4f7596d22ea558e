package service

import (
	"context"
	"database/sql"
	"encoding/json"
	"testing"
	"time"

	_ "github.com/lib/pq"
	"github.com/stretchr/testify/require"

	"github.com/adksession/adksession/integration/testenv"
	"github.com/adksession/adksession/loader"
)

// TestPruneRaces puts writes exactly between the steps of a prune's batch
// (pruneHook) against real Redis and Postgres:
//   - after the prune read its candidates: x is appended to (not flushed),
//     w (cached) appended to and flushed, y appended to, flushed and then
//     evicted from Redis (so that Redis shows nothing when the prune fences
//     it: only the database's update time tells) — all three are kept, with
//     every event;
//   - after the fence: z is deleted as far as readers and writers go (Get
//     and an append through an old handle are ErrNotFound), and its rows
//     are deleted.
func TestPruneRaces(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	dbURL := testenv.FreshDatabase(t)
	require.NoError(t, Migrate(ctx, dbURL))
	svc, err := Open(ctx, Config{RedisURL: testenv.RedisURL(t), DatabaseURL: dbURL,
		Namespace: testenv.UniqueName(t, "prune-") + ":", FlushInterval: 10 * time.Millisecond})
	require.NoError(t, err)
	defer svc.Close(ctx)
	db, err := sql.Open("postgres", dbURL)
	require.NoError(t, err)
	defer db.Close()

	old := time.Now().Add(-90 * 24 * time.Hour)
	handles := map[string]*Session{}
	for _, sid := range []string{"w", "x", "y", "z"} {
		resp, err := svc.Create(ctx, &CreateRequest{AppName: "app", UserID: "u", SessionID: sid})
		require.NoError(t, err)
		for i := range 3 {
			require.NoError(t, svc.AppendEvent(ctx, resp.Session, &Event{Author: "model", InvocationID: "old",
				Timestamp: old.Add(time.Duration(i) * time.Second), Content: json.RawMessage(`{"parts":[{"text":"old"}]}`)}))
		}
		handles[sid] = resp.Session
	}
	require.NoError(t, svc.Flush(ctx))
	evict := func(sid string) {
		k := svc.cache.Keys().Session("app", "u", sid)
		require.NoError(t, svc.rdb.Del(ctx, append(k.Owned(), k.Session)...).Err())
	}
	for _, sid := range []string{"x", "y", "z"} {
		evict(sid) // w stays cached
	}
	appendNew := func(sid string) error {
		return svc.AppendEvent(ctx, handles[sid], &Event{Author: "user", InvocationID: "new", Content: json.RawMessage(`{"parts":[{"text":"new"}]}`)})
	}
	stages := map[loader.PruneStage]int{}
	svc.pruneHook = func(stage loader.PruneStage) {
		stages[stage]++
		if stages[stage] > 1 {
			return
		}
		switch stage {
		case loader.PruneRead:
			require.NoError(t, appendNew("x"))
			require.NoError(t, appendNew("w"))
			require.NoError(t, appendNew("y"))
			require.NoError(t, svc.Flush(ctx))
			evict("y")
		case loader.PruneFenced:
			_, err := svc.Get(ctx, &GetRequest{AppName: "app", UserID: "u", SessionID: "z"})
			require.ErrorIs(t, err, ErrNotFound, "Get of a fenced session")
			require.ErrorIs(t, appendNew("z"), ErrNotFound, "append to a fenced session")
		}
	}
	sum, err := svc.Prune(ctx, &PruneRequest{IdleFor: 30 * 24 * time.Hour})
	require.NoError(t, err)
	require.Equal(t, map[loader.PruneStage]int{loader.PruneRead: 1, loader.PruneFenced: 1}, stages)
	require.Equal(t, [3]int64{1, 3, 3}, [3]int64{sum.Sessions, sum.Events, sum.Kept}, "sessions and events pruned (z), kept (w, x, y)")
	// y's fence was lifted (the hash is gone: y is read back on next use);
	// z's stays until it expires.
	keys := svc.cache.Keys()
	n, err := svc.rdb.Exists(ctx, keys.Session("app", "u", "y").Session).Result()
	require.NoError(t, err)
	require.Zero(t, n, "y is still fenced")
	z, err := svc.rdb.HGetAll(ctx, keys.Session("app", "u", "z").Session).Result()
	require.NoError(t, err)
	require.Equal(t, "1", z["m:del"], "z's fence: %v", z)

	require.NoError(t, svc.Flush(ctx))
	for _, sid := range []string{"w", "x", "y"} {
		got, err := svc.Get(ctx, &GetRequest{AppName: "app", UserID: "u", SessionID: sid})
		require.NoError(t, err, sid)
		require.Equal(t, 4, got.Session.Events().Len(), "events of %s", sid)
		var rows int
		require.NoError(t, db.QueryRow(`SELECT count(*) FROM events WHERE session_id = $1`, sid).Scan(&rows))
		require.Equal(t, 4, rows, "events rows of %s", sid)
	}
	_, err = svc.Get(ctx, &GetRequest{AppName: "app", UserID: "u", SessionID: "z"})
	require.ErrorIs(t, err, ErrNotFound)
	var zRows int
	require.NoError(t, db.QueryRow(`SELECT (SELECT count(*) FROM sessions WHERE id = 'z') + (SELECT count(*) FROM events WHERE session_id = 'z')
  + (SELECT count(*) FROM adksession_sessions WHERE session_id = 'z')`).Scan(&zRows))
	require.Zero(t, zRows, "rows of z")
}
