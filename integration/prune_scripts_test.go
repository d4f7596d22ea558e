package integration

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/adksession/adksession/cache"
	"github.com/adksession/adksession/cache/base"
	"github.com/adksession/adksession/integration/testenv"
	"github.com/adksession/adksession/lua"
)

// TestOpsScriptsRefuseBadInput runs the scripts of operations (prune, dead
// letters) with bad arguments against real Redis: each is an error reply
// naming the argument, and the keys it was given are as they were.
func TestOpsScriptsRefuseBadInput(t *testing.T) {
	t.Parallel()
	ctx := wbCtx(t)
	rdb, err := cache.NewClient(testenv.RedisURL(t))
	require.NoError(t, err)
	defer rdb.Close()
	keys, err := cache.NewKeys(testenv.UniqueName(t, "prune-scripts-")+":", 0)
	require.NoError(t, err)
	k := keys.Session("app", "u", "s")
	sk := keys.ShardKeys(k.Shard)
	snapshot := func() map[string]string {
		out := map[string]string{}
		for _, key := range append([]string{k.Session, k.UserIndex, k.AppIndex, k.User, sk.Dead, sk.Log}, k.Owned()...) {
			v, err := rdb.Dump(ctx, key).Result()
			if err != redis.Nil {
				require.NoError(t, err)
			}
			out[key] = v
		}
		return out
	}
	require.NoError(t, rdb.HSet(ctx, k.Session, "m:inc", 1, "m:ut", 5, "m:rev", 2, "m:fl", 2, "m:cnt", 1).Err())
	require.NoError(t, rdb.ZAdd(ctx, k.Events, redis.Z{Score: 5, Member: "2:{}"}).Err())
	require.NoError(t, rdb.ZAdd(ctx, k.UserIndex, redis.Z{Score: 5, Member: "s"}).Err())
	require.NoError(t, rdb.HSet(ctx, k.User, "m:rev", 1, "m:fl", 1).Err())
	require.NoError(t, rdb.HSet(ctx, keys.App("app").State, "m:rev", 3).Err())
	const dead = `{"id":"1-1","fields":{"k":"c","a":"app","u":"u","i":"s","n":"1"},"reason":"r"}`
	require.NoError(t, rdb.RPush(ctx, sk.Dead, dead).Err())
	require.NoError(t, rdb.XAdd(ctx, &redis.XAddArgs{Stream: sk.Log, Values: []any{"k", "a"}}).Err())
	before := snapshot()
	deadKeys := []string{sk.Dead, sk.Log, sk.Dead}

	fenceKeys := append([]string{k.Session, k.UserIndex, k.AppIndex}, k.Owned()...)
	good := []any{10, 1, 2, 60000, "tok", "s", cache.AppIndexMember("u", "s"), "0"}
	for _, tc := range []struct {
		name   string
		script string
		keys   []string
		argv   []any
		want   string
	}{
		{"fence cutoff", lua.PruneFence, fenceKeys, with(good, 0, "ten"), "ARGV[1]"},
		{"fence incarnation", lua.PruneFence, fenceKeys, with(good, 1, -1), "ARGV[2]"},
		{"fence revision", lua.PruneFence, fenceKeys, with(good, 2, "1.5"), "ARGV[3]"},
		{"fence ttl", lua.PruneFence, fenceKeys, with(good, 3, 0), "ARGV[4]"},
		{"fence big number", lua.PruneFence, fenceKeys, with(good, 0, "9007199254740993"), "ARGV[1]"},
		{"fence token", lua.PruneFence, fenceKeys, with(good, 4, ""), "empty token"},
		{"fence session", lua.PruneFence, fenceKeys, with(good, 5, ""), "empty token"},
		{"unfence token", lua.PruneUnfence, []string{k.Session, k.UserIndex}, []any{"", "s"}, "empty token"},
		{"user empty", lua.PruneUser, []string{k.User, k.UserIndex, k.AppIndex}, []any{""}, "ARGV[1]"},
		{"user NUL", lua.PruneUser, []string{k.User, k.UserIndex, k.AppIndex}, []any{"u\x00"}, "ARGV[1]"},
		{"app revision", lua.PruneApp, []string{keys.App("app").State}, []any{"x"}, "ARGV[1]"},
		{"dead letter action", lua.DeadLetter, deadKeys, []any{"replay", dead, 0, 0}, "ARGV[1]"},
		{"dead letter empty", lua.DeadLetter, deadKeys, []any{"drop", "", 0, 0}, "ARGV[2]"},
		{"dead letter retry releasing", lua.DeadLetter, deadKeys, []any{"retry", dead, 1, 1, "k", "c"}, "ARGV[3]"},
		{"dead letter drop, release 2", lua.DeadLetter, deadKeys, []any{"drop", dead, 2, 0}, "ARGV[3]"},
		{"dead letter retry without fields", lua.DeadLetter, deadKeys, []any{"retry", dead, 0, 0}, "ARGV[4]"},
		{"dead letter retry, 65 fields", lua.DeadLetter, deadKeys, []any{"retry", dead, 0, 65}, "ARGV[4]"},
		{"dead letter drop with fields", lua.DeadLetter, deadKeys, []any{"drop", dead, 0, 1, "k", "c"}, "ARGV[4]"},
		{"dead letter fields missing", lua.DeadLetter, deadKeys, []any{"retry", dead, 0, 2, "k", "c"}, "arguments after"},
	} {
		err := redis.NewScript(tc.script).Run(ctx, rdb, tc.keys, tc.argv...).Err()
		require.Error(t, err, tc.name)
		require.Contains(t, err.Error(), "adksession", tc.name)
		require.Contains(t, err.Error(), tc.want, tc.name)
		require.Equal(t, before, snapshot(), "%s: keys changed", tc.name)
	}
	v, err := redis.NewScript(lua.PruneFence).Run(ctx, rdb, fenceKeys, with(good, 7, "1")...).Slice()
	require.NoError(t, err)
	require.Equal(t, []any{int64(1)}, v, "a dry run says it would fence the cached session")
	require.Equal(t, before, snapshot(), "a dry run wrote")
}

// with returns a copy of argv with argv[i] = v.
func with(argv []any, i int, v any) []any {
	out := append([]any(nil), argv...)
	out[i] = v
	return out
}

// TestPruneScriptsKeepWhatIsPending: the scripts that drop a pruned user's
// and app's cached state keep it while Redis holds something the database
// does not have: a session in the user's index or the app index, a user or
// app state revision that was not flushed.
func TestPruneScriptsKeepWhatIsPending(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	rdb, err := cache.NewClient(testenv.RedisURL(t))
	require.NoError(t, err)
	defer rdb.Close()
	keys, err := cache.NewKeys(testenv.UniqueName(t, "prune-keep-")+":", 0)
	require.NoError(t, err)
	store := cache.NewStore(rdb, cache.Options{Keys: keys, Durable: true})
	k := keys.Session("app", "u", "")
	reset := func() {
		require.NoError(t, rdb.Del(ctx, k.User, k.UserIndex, k.AppIndex).Err())
		require.NoError(t, rdb.HSet(ctx, k.User, "m:rev", 2, "m:fl", 2, "s:lang", `"fr"`).Err())
		require.NoError(t, rdb.ZAdd(ctx, k.UserIndex, redis.Z{Score: 0, Member: cache.IndexComplete}).Err())
	}
	drop := func() bool {
		t.Helper()
		ok, err := store.DropUsers(ctx, []base.StateOwner{{App: "app", User: "u"}})
		require.NoError(t, err)
		return ok[0]
	}
	for _, tc := range []struct {
		name  string
		setup func()
	}{
		{"a session in the user index", func() { rdb.ZAdd(ctx, k.UserIndex, redis.Z{Score: 1, Member: "s"}) }},
		{"a create not flushed (app index)", func() { rdb.ZAdd(ctx, k.AppIndex, redis.Z{Member: cache.AppIndexMember("u", "s")}) }},
		{"a user state revision not flushed", func() { rdb.HSet(ctx, k.User, "m:rev", 3) }},
	} {
		reset()
		tc.setup()
		require.False(t, drop(), tc.name)
		n, err := rdb.Exists(ctx, k.User).Result()
		require.NoError(t, err)
		require.Equal(t, int64(1), n, "%s: the user state was dropped", tc.name)
	}
	reset()
	// Another user's create in the app index does not keep u's state.
	require.NoError(t, rdb.ZAdd(ctx, k.AppIndex, redis.Z{Member: cache.AppIndexMember("u2", "s")}, redis.Z{Member: cache.AppIndexMember("", "s")}).Err())
	require.True(t, drop())
	n, err := rdb.Exists(ctx, k.User, k.UserIndex).Result()
	require.NoError(t, err)
	require.Zero(t, n)

	app := keys.App("app").State
	require.NoError(t, rdb.HSet(ctx, app, "m:rev", 4, "s:motd", `"hi"`).Err())
	ok, err := store.DropApp(ctx, "app", 3)
	require.NoError(t, err)
	require.False(t, ok, "an app state at another revision was dropped")
	ok, err = store.DropApp(ctx, "app", 4)
	require.NoError(t, err)
	require.True(t, ok)
	n, err = rdb.Exists(ctx, app).Result()
	require.NoError(t, err)
	require.Zero(t, n)
}
