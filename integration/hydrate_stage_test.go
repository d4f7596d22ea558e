package integration

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/adksession/adksession/cache"
	"github.com/adksession/adksession/cache/base"
	"github.com/adksession/adksession/integration/testenv"
)

// TestHydrateLeavesNoStagedKeys: a cold read's put-back stages its events
// and ids in keys of their own, in one MULTI, and nothing staged outlives
// it, whatever hydrate.lua answers: it wrote (the staged keys renamed into
// place), Redis held the session already, the read guard moved, or the
// staged events failed its checks (an error reply); events that are not
// the newest of the revision are refused before anything is sent. On a
// standalone Redis and on a cluster.
func TestHydrateLeavesNoStagedKeys(t *testing.T) {
	testenv.EachRedis(t, func(t *testing.T, url string) {
		ctx := context.Background()
		store, rdb := durableStore(t, url, "stage", 8)
		keys := store.Keys()
		st, sk := keys.Stage("a", "u", "s"), keys.Session("a", "u", "s")
		staged := func() int64 { return rdb.Exists(ctx, st.Events, st.EventIDs).Val() }
		args := func(guard cache.ReadGuard) cache.HydrateArgs {
			return cache.HydrateArgs{SessionRef: base.SessionRef{App: "a", User: "u", ID: "s"}, Incarnation: 1, CreateTime: 1, UpdateTime: 1003, Rev: 3,
				Guard: guard, Events: []cache.EventRecord{
					{Seq: 2, Ts: 1002, ID: "e2", JSON: `{"id":"e2"}`}, {Seq: 3, Ts: 1003, ID: "e3", JSON: `{"id":"e3"}`}}}
		}
		guard, err := store.ReadGuard(ctx, base.SessionRef{App: "a", User: "u", ID: "s"})
		require.NoError(t, err)

		// The guard moved since it was read: refused, nothing written or left.
		require.NoError(t, rdb.HIncrBy(ctx, keys.ShardKeys(sk.Shard).Guards, cache.GuardField(base.SessionRef{App: "a", User: "u", ID: "s"}), 1).Err())
		_, err = store.Hydrate(ctx, args(guard), time.Minute)
		require.True(t, errors.Is(err, cache.ErrReadOutdated), "%v", err)
		require.Zero(t, staged())
		require.Zero(t, rdb.Exists(ctx, sk.Session, sk.Events, sk.EventIDs).Val())

		// Events that are not the newest of revision 3: refused before anything is sent.
		guard, err = store.ReadGuard(ctx, base.SessionRef{App: "a", User: "u", ID: "s"})
		require.NoError(t, err)
		bad := args(guard)
		bad.Events[0].Seq = 1
		_, err = store.Hydrate(ctx, bad, time.Minute)
		require.ErrorContains(t, err, "has seq 1, want 2")
		require.Zero(t, staged())

		// Written: the staged keys are the session's now.
		wrote, err := store.Hydrate(ctx, args(guard), time.Minute)
		require.NoError(t, err)
		require.True(t, wrote)
		require.Zero(t, staged())
		require.Equal(t, []string{`2:{"id":"e2"}`, `3:{"id":"e3"}`}, rdb.ZRange(ctx, sk.Events, 0, -1).Val())
		require.Equal(t, []string{"e2", "e3"}, rdb.ZRange(ctx, sk.EventIDs, 0, -1).Val())
		require.Equal(t, "2", rdb.HGet(ctx, sk.Session, "m:first").Val())

		// Redis holds it already: nothing written, nothing left.
		wrote, err = store.Hydrate(ctx, args(guard), time.Minute)
		require.NoError(t, err)
		require.False(t, wrote)
		require.Zero(t, staged())
	})
}

// durableStore is a cache.Store with a database's flags over the Redis of
// url, in a namespace of the test's own (shards: cache.NewKeys), with its
// scripts loaded; the client is closed when the test ends.
func durableStore(t *testing.T, url, prefix string, shards int) (*cache.Store, redis.UniversalClient) {
	t.Helper()
	rdb, err := cache.NewClient(url)
	require.NoError(t, err)
	t.Cleanup(func() { rdb.Close() })
	keys, err := cache.NewKeys(testenv.UniqueName(t, prefix)+":", shards)
	require.NoError(t, err)
	s := cache.NewStore(rdb, cache.Options{Keys: keys, Durable: true})
	require.NoError(t, s.LoadScripts(context.Background()))
	return s, rdb
}

// TestHydrateGetAnswersAsGet: a cold read's put-back reads the session in
// its MULTI (cache.Store.HydrateGet) and answers, for every window, what a
// Get right after it answers, its events taken from those it put back; it
// answers nothing when it did not write or the read did not answer (the
// user's state not in Redis): the caller reads again. On a standalone Redis
// and on a cluster.
func TestHydrateGetAnswersAsGet(t *testing.T) {
	testenv.EachRedis(t, func(t *testing.T, url string) {
		ctx := context.Background()
		store, rdb := durableStore(t, url, "hydget", 8)
		sk := store.Keys().Session("a", "u", "s")
		hydrate := func() cache.HydrateArgs {
			guard, err := store.ReadGuard(ctx, base.SessionRef{App: "a", User: "u", ID: "s"})
			require.NoError(t, err)
			h := cache.HydrateArgs{SessionRef: base.SessionRef{App: "a", User: "u", ID: "s"}, Incarnation: 7, CreateTime: 1000, UpdateTime: 1010, Rev: 12,
				State: []cache.Pair{{Key: "k", Value: `"v"`}}, Guard: guard}
			for seq := int64(3); seq <= 12; seq++ {
				h.Events = append(h.Events, cache.EventRecord{Seq: seq, Ts: 998 + seq, ID: fmt.Sprint("e", seq), JSON: fmt.Sprintf(`{"id":"e%d"}`, seq)})
			}
			return h
		}
		lose := func() { require.NoError(t, rdb.Del(ctx, sk.Session, sk.Events, sk.EventIDs, sk.Undo, sk.Temp).Err()) }
		userGuard, err := store.ReadGuard(ctx, base.SessionRef{App: "a", User: "u"})
		require.NoError(t, err)
		_, err = store.HydrateUser(ctx, "a", "u", 4, 0, []cache.Pair{{Key: "x", Value: "1"}}, time.Minute, userGuard)
		require.NoError(t, err)
		_, err = store.HydrateApp(ctx, "a", 2, []cache.Pair{{Key: "y", Value: "2"}})
		require.NoError(t, err)

		for _, a := range []cache.GetArgs{
			{After: -1}, {After: -1, NumRecent: 3}, {After: -1, NumRecent: 50}, {After: 1005}, {After: 1005, NumRecent: 2},
			{After: 1005, NumRecent: 20}, {After: 5000}, {After: 0, NumRecent: 1}, {After: 1 << 60},
		} {
			a.App, a.User, a.ID = "a", "u", "s"
			lose()
			wrote, snap, err := store.HydrateGet(ctx, hydrate(), time.Minute, a)
			require.NoError(t, err)
			require.True(t, wrote)
			require.NotNil(t, snap, "%+v", a)
			want, err := store.Get(ctx, a)
			require.NoError(t, err)
			got := *snap
			got.Events = nil
			for _, e := range snap.Events {
				e.ID = "" // Get reads no ids
				got.Events = append(got.Events, e)
			}
			if len(want.Events) == 0 {
				want.Events = nil
			}
			require.Equal(t, want, &got, "%+v", a)
			require.Equal(t, map[string]string{"x": "1"}, got.User)
			require.Equal(t, map[string]string{"y": "2"}, got.App)
		}

		a := cache.GetArgs{SessionRef: base.SessionRef{App: "a", User: "u", ID: "s"}, After: -1}
		// Redis holds the session already: nothing written, nothing answered.
		wrote, snap, err := store.HydrateGet(ctx, hydrate(), time.Minute, a)
		require.NoError(t, err)
		require.False(t, wrote)
		require.Nil(t, snap)
		// The user's state is not in Redis: written, but the read answers "user not cached".
		lose()
		require.NoError(t, rdb.Del(ctx, sk.User).Err())
		wrote, snap, err = store.HydrateGet(ctx, hydrate(), time.Minute, a)
		require.NoError(t, err)
		require.True(t, wrote)
		require.Nil(t, snap)
		_, err = store.Get(ctx, a)
		require.ErrorIs(t, err, cache.ErrUserNotCached)
		// A compacted view is not read this way.
		_, _, err = store.HydrateGet(ctx, hydrate(), time.Minute, cache.GetArgs{SessionRef: base.SessionRef{App: "a", User: "u", ID: "s"}, After: -1, Compacted: true})
		require.Error(t, err)
	})
}
