package integration

// The scripts under inputs beyond Lua's limits and from careless clients
// (retried appends, reused event ids, handles that outlived a Delete),
// against real Redis (standalone and the 3-master Cluster) and Postgres.

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/adksession/adksession/cache"
	"github.com/adksession/adksession/cache/base"
	"github.com/adksession/adksession/integration/testenv"
	"github.com/adksession/adksession/lua"
	"github.com/adksession/adksession/service"
)

func TestTrustScriptsStandalone(t *testing.T) {
	t.Parallel()
	runTrustScripts(t, testenv.RedisURL(t))
}

func TestTrustScriptsCluster(t *testing.T) {
	t.Parallel()
	runTrustScripts(t, testenv.ClusterURL(t))
}

func runTrustScripts(t *testing.T, url string) {
	t.Run("ManyKeys", func(t *testing.T) { t.Parallel(); testManyKeys(t, url) })
	t.Run("BadScriptArguments", func(t *testing.T) { t.Parallel(); testBadScriptArguments(t, url) })
	t.Run("EventIDRetry", func(t *testing.T) { t.Parallel(); testEventIDRetry(t, url) })
	t.Run("EventIDRetryFinishesAppStep", func(t *testing.T) { t.Parallel(); testEventIDRetryFinishesAppStep(t, url) })
	t.Run("EventIDFromDatabase", func(t *testing.T) { t.Parallel(); testEventIDFromDatabase(t, url) })
	t.Run("EventIDAcrossSessions", func(t *testing.T) { t.Parallel(); testEventIDAcrossSessions(t, url) })
	t.Run("HandleOfDeletedIncarnation", func(t *testing.T) { t.Parallel(); testHandleOfDeletedIncarnation(t, url) })
	t.Run("StoredTimestampInJSON", func(t *testing.T) { t.Parallel(); testStoredTimestampInJSON(t, url) })
	t.Run("AppChangeOrder", func(t *testing.T) { t.Parallel(); testAppChangeOrder(t, url) })
	t.Run("CreateChecksUserIndex", func(t *testing.T) { t.Parallel(); testCreateChecksUserIndex(t, url) })
	t.Run("ReadGuards", func(t *testing.T) { t.Parallel(); testReadGuards(t, url) })
}

// testCreateChecksUserIndex: with a database, create.lua creates a session
// whose hash Redis does not hold only when the user's session index is
// complete and does not list the id: a flushed session Redis evicted is in
// the database, and the complete index lists it (docs/design.md, "Create").
// An incomplete index is -4 (the loader completes it, then the create runs
// again), a listed id -10; both with nothing written.
func testCreateChecksUserIndex(t *testing.T, url string) {
	e := newWB(t, url, "", nil)
	ctx := wbCtx(t)
	k := e.keys.Session("app", "u", "s")
	create := func() int64 {
		keys := []string{k.Session, k.Events, k.Temp, k.User, k.UserIndex, k.AppIndex, k.Log, k.Undo, k.EventIDs}
		r, err := e.rdb.Eval(ctx, lua.Create, keys, "wake", "app", "u", "s", 1000, cache.AppIndexMember("u", "s"), "", "tok", "", 0, 0, 0, 0).Int64Slice()
		require.NoError(t, err)
		return r[0]
	}
	require.NoError(t, e.rdb.HSet(ctx, k.User, "m:rev", 0).Err())
	require.NoError(t, e.rdb.ZAdd(ctx, k.UserIndex, redis.Z{Score: 5, Member: "other"}).Err())
	before := e.dump()
	require.EqualValues(t, -4, create(), "an index without its completeness marker")
	require.Equal(t, before, e.dump(), "nothing written")

	require.NoError(t, e.rdb.ZAdd(ctx, k.UserIndex, redis.Z{Score: 0, Member: cache.IndexComplete}, redis.Z{Score: 7, Member: "s"}).Err())
	before = e.dump()
	require.EqualValues(t, -10, create(), "an id the complete index lists: the database has it")
	require.Equal(t, before, e.dump(), "nothing written")

	require.NoError(t, e.rdb.ZRem(ctx, k.UserIndex, "s").Err())
	require.EqualValues(t, 0, create())
	require.Equal(t, "1000", e.hash(k.Session)["m:inc"])
	score, err := e.rdb.ZScore(ctx, k.UserIndex, "s").Result()
	require.NoError(t, err)
	require.EqualValues(t, 1000, score)
}

// testAppChangeOrder: app_apply.lua applies a change to the keys no change
// with a higher order number (app_order.lua) wrote, whatever order the
// calls come in; once Redis lost the order hash, a change numbered before
// is refused with nothing written (the writer takes a new number) or, for
// the flusher's repair, skipped and recorded as skipped, so that the
// writer's new number, or a retry's, applies it; with a database,
// no number is given while the app state is not cached (docs/design.md,
// "App state").
func testAppChangeOrder(t *testing.T, url string) {
	e := newWB(t, url, "", nil)
	ctx := wbCtx(t)
	a := e.keys.App("app")
	order := func(durable string) int64 {
		n, err := e.rdb.Eval(ctx, lua.AppOrder, []string{a.State, a.Order}, durable, 0, 0).Int64()
		require.NoError(t, err)
		return n
	}
	apply := func(id string, n int64, mode string, pairs ...string) int64 {
		num := ""
		if n > 0 {
			num = strconv.FormatInt(n, 10)
		}
		args := []any{id, "1000", "60000", "0", num, mode, len(pairs) / 2}
		for _, p := range pairs {
			args = append(args, p)
		}
		r, err := e.rdb.Eval(ctx, lua.AppApply, []string{a.State, a.Applied, a.Order}, args...).Int64()
		require.NoError(t, err)
		return r
	}
	oldest, older, newer := order("0"), order("0"), order("0")
	require.Less(t, oldest, older)
	require.Less(t, older, newer)
	require.EqualValues(t, 1, apply("newer", newer, "", "k", `"newer"`))
	require.EqualValues(t, 1, apply("older", older, "", "k", `"older"`, "x", "1"), "applied to the keys it alone wrote")
	// m:sz: the state's total, "k" and "x" with their values (1 + 7, 1 + 1 bytes).
	require.Equal(t, map[string]string{"m:rev": "2", "m:sz": "10", "s:k": `"newer"`, "s:x": "1"}, e.hash(a.State))
	require.Equal(t, strconv.FormatInt(newer, 10), e.hash(a.Order)["k:k"])
	require.Equal(t, strconv.FormatInt(older, 10), e.hash(a.Order)["k:x"])
	require.EqualValues(t, 0, apply("older", older, "", "k", `"older"`, "x", "2"), "once per id")
	require.EqualValues(t, 1, apply("oldest", oldest, "", "k", `"oldest"`), "a change that writes nothing")
	require.Equal(t, "2", e.hash(a.State)["m:rev"], "no new revision for it")

	// Redis lost the order hash.
	require.NoError(t, e.rdb.Del(ctx, a.Order).Err())
	later := order("0")
	require.Greater(t, later, newer)
	require.Equal(t, e.hash(a.Order)["m:floor"], strconv.FormatInt(later-1, 10))
	before := e.dump()
	require.EqualValues(t, -6, apply("lost", newer, "", "k", `"lost"`), "the writer takes a new number")
	require.Equal(t, before, e.dump(), "nothing written")
	require.EqualValues(t, -6, apply("lost", newer, "r", "k", `"lost"`), "the repair skips it")
	require.Equal(t, `"newer"`, e.hash(a.State)["s:k"])
	require.EqualValues(t, -6, apply("lost", newer, "r", "k", `"lost"`), "again, in another pass")
	require.Equal(t, `"newer"`, e.hash(a.State)["s:k"])
	// The writer, still running, or a client's retry of the event comes
	// with a number taken after the skip: it applies the change then
	// (before: recorded as applied, the retry was acknowledged with the
	// app: keys never written; simulation seed 157171261942).
	require.EqualValues(t, 1, apply("lost", later, "", "k", `"lost"`), "the writer applies it with its new number")
	require.Equal(t, `"lost"`, e.hash(a.State)["s:k"])
	require.EqualValues(t, 0, apply("lost", order("0"), "", "k", `"lost"`), "once")
	// A retry of a flushed event applies only a change the repair skipped.
	retry := order("0")
	before = e.dump()
	require.EqualValues(t, 0, apply("flushed", retry, "s", "k", `"flushed"`), "the flusher applied it")
	require.Equal(t, before, e.dump(), "nothing written")
	require.EqualValues(t, -6, apply("skipped", newer, "r", "k", `"skipped"`))
	require.EqualValues(t, 1, apply("skipped", order("0"), "s", "k", `"skipped"`), "the repair skipped it")
	require.Equal(t, `"skipped"`, e.hash(a.State)["s:k"])
	require.EqualValues(t, 0, apply("skipped", order("0"), "s", "k", `"skipped"`), "once")
	members, err := e.rdb.ZRange(ctx, a.Applied, 0, -1).Result()
	require.NoError(t, err)
	require.NotContains(t, members, "skip/skipped", "the skip's record goes once it is applied")
	require.EqualValues(t, 1, apply("later", order("0"), "", "k", `"later"`))
	require.Equal(t, `"later"`, e.hash(a.State)["s:k"])
	require.EqualValues(t, 1, apply("legacy", 0, "", "k", `"legacy"`), "a change logged without a number applies as it comes")
	require.Equal(t, `"legacy"`, e.hash(a.State)["s:k"])

	// Redis lost the last number taken, not the hash (a failover to a
	// replica that lagged, a restart from an older AOF): the numbers taken
	// after it are still above it, so the lost change's repair leaves the
	// newer value.
	kept := e.hash(a.Order)["m:n"]
	taken := order("0")
	require.NoError(t, e.rdb.HSet(ctx, a.Order, "m:n", kept).Err())
	again := order("0")
	require.Greater(t, again, taken, "no number twice, none below one taken")
	require.EqualValues(t, 1, apply("after", again, "", "k", `"after"`))
	require.EqualValues(t, 1, apply("taken", taken, "r", "k", `"taken"`, "y", "1"), "the repair of the lost change")
	require.Equal(t, `"after"`, e.hash(a.State)["s:k"], "leaves the newer value")
	require.Equal(t, "1", e.hash(a.State)["s:y"], "writes what no newer change wrote")

	// With a database, an app state Redis does not hold is loaded first.
	b := e.keys.App("other")
	before = e.dump()
	n, err := e.rdb.Eval(ctx, lua.AppOrder, []string{b.State, b.Order}, "1", 0, 0).Int64()
	require.NoError(t, err)
	require.EqualValues(t, -4, n)
	require.Equal(t, before, e.dump(), "nothing written")
}

// flushOnce drains the change log with a flusher of its own, stopped before
// it returns, so that the test's Service (DisableFlusher) sees no background
// writes while it compares dumps.
func (e *wbEnv) flushOnce() {
	e.t.Helper()
	cfg := e.cfg
	cfg.DisableFlusher = false
	svc, err := service.Open(wbCtx(e.t), cfg)
	require.NoError(e.t, err)
	e.flush(svc)
	require.NoError(e.t, svc.Close(wbCtx(e.t)))
}

// dump is every key of the namespace with its DUMP: equal dumps, nothing written.
func (e *wbEnv) dump() map[string]string {
	e.t.Helper()
	ctx := wbCtx(e.t)
	out := map[string]string{}
	scan := func(ctx context.Context, c *redis.Client) error {
		it := c.Scan(ctx, 0, e.cfg.Namespace+"*", 1000).Iterator()
		for it.Next(ctx) {
			v, err := c.Dump(ctx, it.Val()).Result()
			if err != nil {
				return err
			}
			out[it.Val()] = v
		}
		return it.Err()
	}
	switch c := e.rdb.(type) {
	case *redis.ClusterClient:
		var mu sync.Mutex
		require.NoError(e.t, c.ForEachMaster(ctx, func(ctx context.Context, m *redis.Client) error {
			mu.Lock()
			defer mu.Unlock()
			return scan(ctx, m)
		}))
	case *redis.Client:
		require.NoError(e.t, scan(ctx, c))
	}
	return out
}

// testManyKeys: a session whose state grows past Lua's unpack limit
// (about 8 000 values) over many events, with user and app state as big, is
// appended to, read, flushed, lost from Redis, read back cold, appended to
// again and rewound. Every script on that path (append, get, flushed,
// hydrate, hydrate_state, app_apply, rewind) handles it.
func testManyKeys(t *testing.T, url string) {
	// Deltas of 1 500 and 9 000 keys: above the default Config.MaxDeltaKeys,
	// which guards the service, not the scripts.
	e := newWB(t, url, testenv.FreshDatabase(t), func(c *service.Config) { c.MaxDeltaKeys = 10000 })
	ctx := wbCtx(t)
	const events, perEvent = 40, 500 // 20 000 session keys
	sess := e.create(e.svc, "big", "u", "s", map[string]any{"c": 4})
	want := map[string]any{"c": float64(4)}
	for i := range events {
		delta := map[string]any{}
		for j := range perEvent {
			k := fmt.Sprintf("k%05d", i*perEvent+j)
			delta[k] = float64(i)
			want[k] = float64(i)
			if i < 20 { // 10 000 user: and app: keys
				delta[fmt.Sprintf("user:u%05d", i*perEvent+j)] = float64(i)
				delta[fmt.Sprintf("app:a%05d", i*perEvent+j)] = float64(i)
				want[fmt.Sprintf("user:u%05d", i*perEvent+j)] = float64(i)
				want[fmt.Sprintf("app:a%05d", i*perEvent+j)] = float64(i)
			}
		}
		e.mustAppend(e.svc, sess, fmt.Sprintf("inv-%02d", i), "x", delta)
	}
	require.Equal(t, want, stateMap(sess), "the appending handle")
	got := e.getSess("big", "u", "s")
	require.Equal(t, want, stateMap(got), "a Get")
	require.Equal(t, events, got.Events().Len())

	e.flush(e.svc)
	require.Positive(t, e.wipeNamespace())
	cold := e.getSess("big", "u", "s")
	require.Equal(t, want, stateMap(cold), "a cold Get")
	require.Equal(t, events, cold.Events().Len())

	// Appending to what was read back, then a rewind to before the 11th invocation.
	delta := map[string]any{}
	for j := range 9000 {
		delta[fmt.Sprintf("k%05d", j)] = "late"
	}
	e.mustAppend(e.svc, cold, "inv-late", "late", delta)
	_, err := e.svc.Rewind(ctx, &service.RewindRequest{AppName: "big", UserID: "u", SessionID: "s", BeforeInvocationID: "inv-10"})
	require.NoError(t, err)
	after := stateMap(e.getSess("big", "u", "s"))
	for k, v := range want {
		switch {
		case strings.HasPrefix(k, "user:") || strings.HasPrefix(k, "app:"):
			require.Equal(t, v, after[k], k) // not rewound
		case k == "c":
			require.Equal(t, float64(4), after[k], "create-time state")
		default:
			n, _ := strconv.Atoi(k[1:])
			if n < 10*perEvent {
				require.Equal(t, float64(n/perEvent), after[k], k)
			} else {
				require.Nil(t, after[k], k) // did not exist before inv-10
			}
		}
	}
	e.flush(e.svc)
	var rows int
	require.NoError(t, e.db.QueryRow(`SELECT count(*) FROM events WHERE app_name = 'big'`).Scan(&rows))
	require.Equal(t, events+2, rows)
}

func (e *wbEnv) getSess(app, user, sid string) *service.Session {
	e.t.Helper()
	r, err := e.svc.Get(wbCtx(e.t), &service.GetRequest{AppName: app, UserID: user, SessionID: sid})
	require.NoError(e.t, err)
	return r.Session
}

// testBadScriptArguments calls each writing script directly with arguments
// the service never sends (a count beyond the arguments, a timestamp that
// is not an integer or beyond 2^53, extra arguments): each refuses with an
// error reply before its first write, so the namespace is unchanged.
func testBadScriptArguments(t *testing.T, url string) {
	e := newWB(t, url, "", nil)
	ctx := wbCtx(t)
	sess := e.create(e.svc, "app", "u", "s", map[string]any{"a": 1})
	e.mustAppend(e.svc, sess, "inv", "hi", map[string]any{"b": 2, "temp:t": 1})
	k := e.keys.Session("app", "u", "s")
	a := e.keys.App("app")
	sessKeys := func(ks ...string) []string { return ks }
	appendKeys := sessKeys(k.Session, k.Events, k.Temp, k.User, k.UserIndex, k.Log, k.Undo, k.EventIDs)
	inc := e.hash(k.Session)["m:inc"]
	guards := e.keys.ShardKeys(k.Shard).Guards
	h := e.keys.Session("app", "u", "h")
	hs := e.keys.Stage("app", "u", "h")
	hydrateKeys := sessKeys(h.Session, h.Events, h.EventIDs, h.Undo, e.keys.ShardKeys(h.Shard).Guards, h.Temp, h.UserIndex,
		hs.Events, hs.EventIDs)
	// One event staged as Redis's ZADDs stage it before hydrate.lua (seq 3), left in place: the script never
	// writes them when it refuses.
	require.NoError(t, e.rdb.ZAdd(ctx, hs.Events, redis.Z{Score: 1000, Member: "3:{}"}).Err())
	require.NoError(t, e.rdb.ZAdd(ctx, hs.EventIDs, redis.Z{Score: 3, Member: "e"}).Err())
	flushedKeys := sessKeys(k.Session, k.Events, k.User, k.Undo, k.UserIndex, k.AppIndex, k.EventIDs, guards, k.Temp)
	v := e.keys.Session("app", "v", "")
	vGuards := e.keys.ShardKeys(v.Shard).Guards
	goodAppend := func() []any {
		return []any{"0", "app", "u", "s", "1", inc, "", "1000", "inv2", `{"id":"x","timestamp":`, `}`, "x", "0", "",
			"1", "k", "1", "0", "0", "0", "0"}
	}
	with := func(args []any, i int, v any) []any { args[i] = v; return args }
	nk := e.keys.Session("app", "u", "new")
	forkKeys := sessKeys(k.Session, k.Events, k.Undo, k.EventIDs, nk.Session, nk.Events, nk.Temp, nk.Undo, nk.EventIDs,
		k.User, k.UserIndex, k.AppIndex, k.Log)
	goodFork := func() []any { // computed from the history: one event
		return []any{"", "app", "u", "new", "1000", "u\x00new", "token", "", inc, "{}", "0", "1", "1", "1000", "e1", "{}"}
	}
	cases := []struct {
		name   string
		script string
		keys   []string
		args   []any
	}{
		{"append: handle revision not an integer", lua.Append, appendKeys, with(goodAppend(), 4, "1.5")},
		{"append: update time not an integer", lua.Append, appendKeys, with(goodAppend(), 4, "=soon")},
		{"append: incarnation not an integer", lua.Append, appendKeys, with(goodAppend(), 5, "x")},
		{"append: temp TTL not an integer", lua.Append, appendKeys, append(goodAppend()[:19], "1", "temp:t", "2", "1h", "0")},
		{"append: temp TTL missing", lua.Append, appendKeys, append(goodAppend()[:19], "1", "temp:t", "2", "0")},
		{"append: timestamp beyond 2^53", lua.Append, appendKeys, with(goodAppend(), 7, "253402214400000000")},
		{"append: timestamp not an integer", lua.Append, appendKeys, with(goodAppend(), 7, "1.5")},
		{"append: timestamp in exponent form", lua.Append, appendKeys, with(goodAppend(), 7, "2.534022144e+17")},
		{"append: pairs beyond the arguments", lua.Append, appendKeys, with(goodAppend(), 14, "9000")},
		{"append: app order not an integer", lua.Append, appendKeys, append(goodAppend(), `{"a":1}`, "x")},
		{"append: app order missing", lua.Append, appendKeys, append(goodAppend(), `{"a":1}`)},
		{"append: app delta empty", lua.Append, appendKeys, append(goodAppend(), "", "5")},
		{"append: an argument too many", lua.Append, appendKeys, append(goodAppend(), `{"a":1}`, "5", "extra")},
		{"append: state cap not an integer", lua.Append, appendKeys, with(goodAppend(), 17, "1.5")},
		{"append: state cap missing", lua.Append, appendKeys, append(goodAppend()[:17], "0", "0", "0")},
		{"append: user state cap missing", lua.Append, appendKeys, append(goodAppend()[:18], "1", "k", "1", "0", "0")},
		{"append: index entry with an unknown tag", lua.Append, appendKeys, with(goodAppend(), 13, "z0:")},
		{"append: index entry cut short", lua.Append, appendKeys, with(goodAppend(), 13, "c9:call")},
		{"append: index entry's range not two integers", lua.Append, appendKeys, with(goodAppend(), 13, "k3:1 x")},
		{"append: index entry's endTime not an integer", lua.Append, appendKeys, with(goodAppend(), 13, "j3:1.5")},
		{"append: artifact version not an integer", lua.Append, appendKeys, append(goodAppend()[:20], "1", "f.txt", "v2")},
		{"create: create time beyond 2^53", lua.Create,
			sessKeys(e.keys.Session("app", "u", "new").Session, k.Events, k.Temp, k.User, k.UserIndex, k.AppIndex, k.Log, k.Undo, k.EventIDs),
			[]any{"0", "app", "u", "new", "1e300", "u:new", "", "token", "", "0", "0", "0", "0"}},
		{"create: app order not an integer", lua.Create,
			sessKeys(e.keys.Session("app", "u", "new").Session, k.Events, k.Temp, k.User, k.UserIndex, k.AppIndex, k.Log, k.Undo, k.EventIDs),
			[]any{"0", "app", "u", "new", "1000", "u:new", `{"a":1}`, "token", "0", "0", "0", "0", "0"}},
		{"create: pairs beyond the arguments", lua.Create,
			sessKeys(e.keys.Session("app", "u", "new").Session, k.Events, k.Temp, k.User, k.UserIndex, k.AppIndex, k.Log, k.Undo, k.EventIDs),
			[]any{"0", "app", "u", "new", "1000", "u:new", "", "token", "", "5", "k", "1", "0"}},
		{"create: state cap negative", lua.Create,
			sessKeys(e.keys.Session("app", "u", "new").Session, k.Events, k.Temp, k.User, k.UserIndex, k.AppIndex, k.Log, k.Undo, k.EventIDs),
			[]any{"0", "app", "u", "new", "1000", "u:new", "", "token", "", "0", "0", "-1", "0"}},
		{"get: events mode neither 1 nor 0", lua.Get, sessKeys(k.Session, k.Events, k.Temp, k.User, k.Undo), []any{"", "1", "2"}},
		{"get: newest events read beside not an integer", lua.Get, sessKeys(k.Session, k.Events, k.Temp, k.User, k.Undo), []any{"", "1", "1", "32x"}},
		{"hydrate: staged seqs not ending at the revision", lua.Hydrate, hydrateKeys,
			[]any{"1", "1", "1", "5", "60000", "0", "1", "0", "", "h"}},
		{"hydrate: more events announced than staged", lua.Hydrate, hydrateKeys,
			[]any{"1", "1", "1", "3", "60000", "0", "2", "0", "", "h"}},
		{"hydrate: more events announced than the revision", lua.Hydrate, hydrateKeys,
			[]any{"1", "1", "1", "3", "60000", "0", "4", "0", "", "h"}},
		{"hydrate: read guard arguments missing", lua.Hydrate, hydrateKeys,
			[]any{"1", "1", "1", "3", "60000", "0", "1"}},
		{"hydrate: staging keys missing", lua.Hydrate, hydrateKeys[:7],
			[]any{"1", "1", "1", "3", "60000", "0", "1", "0", "", "h"}},
		{"hydrate_state: revision not an integer", lua.HydrateState, sessKeys(v.User, vGuards),
			[]any{"x", "0", "", "0", "0", ""}},
		{"hydrate_state: flush count not an integer", lua.HydrateState, sessKeys(v.User, vGuards),
			[]any{"1", "-1", "", "0", "0", ""}},
		{"hydrate_state: read guard arguments missing", lua.HydrateState, sessKeys(v.User, vGuards),
			[]any{"1", "0", "", "0"}},
		{"state_read: an argument", lua.StateRead, sessKeys(v.User), []any{"x"}},
		{"hydrate_index: update time not an integer", lua.HydrateIndex,
			sessKeys(v.UserIndex, vGuards, e.keys.Session("app", "v", "x").Session),
			[]any{"60000", "0", "", "x", "soon"}},
		{"hydrate_index: read guard arguments missing", lua.HydrateIndex,
			sessKeys(v.UserIndex, vGuards, e.keys.Session("app", "v", "x").Session),
			[]any{"60000", "x", "1"}},
		{"app_apply: pairs beyond the arguments", lua.AppApply, sessKeys(a.State, a.Applied, a.Order),
			[]any{"id", "1000", "1000", "0", "", "", "3"}},
		{"app_apply: order not an integer", lua.AppApply, sessKeys(a.State, a.Applied, a.Order),
			[]any{"id", "1000", "1000", "0", "1.5", "", "1", "k", "1"}},
		{"app_apply: unknown mode", lua.AppApply, sessKeys(a.State, a.Applied, a.Order),
			[]any{"id", "1000", "1000", "0", "5", "x", "1", "k", "1"}},
		{"app_order: database flag neither 1 nor 0", lua.AppOrder, sessKeys(a.State, a.Order), []any{"yes", "0", "0"}},
		{"app_order: value size not an integer", lua.AppOrder, sessKeys(a.State, a.Order), []any{"0", "0", "1", "k", "1.5"}},
		{"app_order: pairs beyond the arguments", lua.AppOrder, sessKeys(a.State, a.Order), []any{"0", "100", "3", "k", "1"}},
		{"rewind: computed pairs beyond the arguments", lua.Rewind, sessKeys(k.Session, k.Events, k.Temp, k.UserIndex, k.Log, k.Undo, k.EventIDs),
			[]any{"0", "app", "u", "s", "inv", "e-x", "2000", `{"id":"r","timestamp":`, `,"actions":{"stateDelta":`, `}}`, "r", "1", "4", "k", "1"}},
		{"fork: create time beyond 2^53", lua.Fork, forkKeys, with(goodFork(), 4, "1e300")},
		{"fork: an argument too many", lua.Fork, forkKeys, append(with(goodFork(), 8, "")[:9], "extra")},
		{"fork: incarnation not an integer", lua.Fork, forkKeys, with(goodFork(), 8, "1.5")},
		{"fork: create-time state not a JSON object", lua.Fork, forkKeys, with(goodFork(), 9, "[]")},
		{"fork: state pairs beyond the arguments", lua.Fork, forkKeys, with(goodFork(), 10, "9")},
		{"fork: events beyond the arguments", lua.Fork, forkKeys, with(goodFork(), 11, "2")},
		{"fork: first event's seq not 1", lua.Fork, forkKeys, with(goodFork(), 12, "2")},
		{"fork: event timestamp not an integer", lua.Fork, forkKeys, with(goodFork(), 13, "1.5")},
		{"fork: event timestamps not increasing", lua.Fork, forkKeys, append(with(goodFork(), 11, "2"), "2", "1000", "e2", "{}")},
		{"flushed: TTL not an integer", lua.Flushed, flushedKeys,
			[]any{inc, "1", "", "soon", "1000", "u:s", "1", "2", "", "0", "", "0", "", "s"}},
		{"flushed: an argument too many", lua.Flushed, flushedKeys,
			[]any{inc, "1", "", "60000", "1000", "u:s", "1", "2", "", "0", "", "0", "", "s", "extra"}},
		{"flushed: hold not an integer", lua.Flushed, flushedKeys,
			[]any{inc, "1", "", "60000", "1000", "u:s", "1", "2", "", "1.5", "", "0", "", "s"}},
		{"flushed: rebased parts neither s nor u", lua.Flushed, flushedKeys,
			[]any{inc, "1", "", "60000", "1000", "u:s", "1", "2", "x", "0", "", "0", "", "s"}},
		{"flushed: update time not an integer", lua.Flushed, flushedKeys,
			[]any{inc, "1", "", "60000", "1000", "u:s", "1", "2", "", "0", "", "0", "soon", "s"}},
		{"flushed: read guard fields missing", lua.Flushed, flushedKeys,
			[]any{inc, "1", "", "60000", "1000", "u:s"}},
		{"flushed: empty read guard field", lua.Flushed, flushedKeys,
			[]any{inc, "1", "", "60000", "1000", "u:s", "", "2", "", "0", "", "0", "", "s"}},
		{"ack: more dead letters than arguments", lua.Ack, sessKeys(k.Log, e.keys.ShardKeys(k.Shard).Dead),
			[]any{"5", "{}"}},
		{"state_dead: revision not an integer", lua.StateDead, sessKeys(k.User), []any{"1.5"}},
		{"lease_acquire: lease time not an integer", lua.LeaseAcquire, sessKeys(e.keys.ShardKeys(k.Shard).Lease),
			[]any{"me", "15s"}},
		{"index_build: events cut short", lua.IndexBuild, sessKeys(k.Session, k.Undo), []any{inc, "2", "1", "1000", "inv"}},
		{"index_build: no events", lua.IndexBuild, sessKeys(k.Session, k.Undo), []any{inc, "2", "1"}},
		{"index_build: timestamp not an integer", lua.IndexBuild, sessKeys(k.Session, k.Undo), []any{inc, "2", "1", "soon", "inv", ""}},
		{"index_build: events past the revision", lua.IndexBuild, sessKeys(k.Session, k.Undo), []any{inc, "1", "1", "1000", "inv", "", "1001", "inv", ""}},
		{"index_build: index entry malformed", lua.IndexBuild, sessKeys(k.Session, k.Undo), []any{inc, "2", "1", "1000", "inv", "k3:1 x"}},
		{"compacted_calls: revision not an integer", lua.CompactedCalls, sessKeys(k.Session, k.Events, k.Undo), []any{inc, "1.5", "call"}},
		{"delete: time not an integer", lua.Delete, sessKeys(k.Session, k.Events, k.Temp, k.UserIndex, k.AppIndex, k.Log, k.Undo, k.EventIDs),
			[]any{"0", "app", "u", "s", "soon", "u:s"}},
	}
	for _, c := range cases {
		before := e.dump()
		err := e.rdb.Eval(ctx, c.script, c.keys, c.args...).Err()
		require.Error(t, err, c.name)
		require.Contains(t, err.Error(), "adksession:", c.name)
		require.Equal(t, before, e.dump(), "%s: the namespace changed", c.name)
	}
	// Refusals after the event id's check write nothing either: the id is indexed (ZADD NX, append.lua's
	// first write) only once every check passed.
	for _, c := range []struct {
		name string
		args []any
		code int64
	}{
		{"stale handle", with(goodAppend(), 4, "0"), -3},
		{"session state cap", with(goodAppend(), 17, "1"), -12},
	} {
		before := e.dump()
		r, err := e.rdb.Eval(ctx, lua.Append, appendKeys, c.args...).Slice()
		require.NoError(t, err, c.name)
		require.Equal(t, c.code, r[0], c.name)
		require.Equal(t, before, e.dump(), "%s: the namespace changed", c.name)
	}
	// The well-formed call appends: the cases above failed for their one bad argument. Its event sets no
	// user: key, so it needs no user hash: it appends while Redis lacks it, and reads nothing of it.
	require.NoError(t, e.rdb.Del(ctx, k.User).Err())
	n, err := e.rdb.Eval(ctx, lua.Append, appendKeys, goodAppend()...).Slice()
	require.NoError(t, err)
	require.EqualValues(t, 0, n[0])
	require.Zero(t, e.rdb.Exists(ctx, k.User).Val(), "the user hash is not written")
	// The well-formed fork forks: the fork cases above failed for their one bad argument.
	f, err := e.rdb.Eval(ctx, lua.Fork, forkKeys, goodFork()...).Slice()
	require.NoError(t, err)
	require.EqualValues(t, 0, f[0])
	require.Equal(t, []string{"1:{}"}, e.rdb.ZRange(ctx, nk.Events, 0, -1).Val())
}

// testEventIDRetry: an append retried after its reply was lost (same id,
// same event, a new timestamp) writes nothing and answers the stored id and
// timestamp, even through a handle that missed the first attempt; an id
// reused for another event is ErrAlreadyExists with nothing written.
func testEventIDRetry(t *testing.T, url string) {
	e := newWB(t, url, testenv.FreshDatabase(t), func(c *service.Config) { c.DisableFlusher = true })
	ctx := wbCtx(t)
	sess := e.create(e.svc, "app", "u", "s", nil)
	lost := e.getSess("app", "u", "s") // the handle whose append's reply is "lost"

	first := &service.Event{ID: "ev-1", InvocationID: "inv", Author: "model",
		Content: json.RawMessage(`{"parts":[{"text":"hi"}]}`),
		Actions: service.EventActions{StateDelta: map[string]any{"n": 1, "user:u": 1, "app:a": 1, "temp:t": 1}}}
	require.NoError(t, e.svc.AppendEvent(ctx, sess, first))
	appRev := e.hash(e.keys.App("app").State)["m:rev"]

	retry := &service.Event{ID: "ev-1", InvocationID: "inv", Author: "model",
		Content:   json.RawMessage(`{"parts":[{"text":"hi"}]}`),
		Timestamp: first.Timestamp.Add(time.Second),
		Actions:   service.EventActions{StateDelta: map[string]any{"n": 1, "user:u": 1, "app:a": 1, "temp:t": 1}}}
	// A retry takes an order number for its app: keys before it learns that
	// it is one (app_order.lua): the order hash's counter is all it changes.
	order := e.keys.App("app").Order
	orderOfA := e.hash(order)["k:a"]
	before := e.dump()
	delete(before, order)
	require.NoError(t, e.svc.AppendEvent(ctx, lost, retry))
	after := e.dump()
	delete(after, order)
	require.Equal(t, before, after, "a retry writes nothing")
	require.Equal(t, orderOfA, e.hash(order)["k:a"], "the app key keeps the first attempt's order number")
	require.Equal(t, first.Timestamp, retry.Timestamp, "the stored timestamp")
	require.Equal(t, appRev, e.hash(e.keys.App("app").State)["m:rev"], "app delta applied once")
	// The handle that missed the reply now holds the event, as if the first attempt had answered.
	require.Equal(t, 1, lost.Events().Len())
	require.Equal(t, stateMap(sess), stateMap(lost))
	require.NoError(t, e.svc.AppendEvent(ctx, lost, &service.Event{InvocationID: "inv", Author: "model"}), "the handle is current")

	// The same id for another event.
	other := &service.Event{ID: "ev-1", InvocationID: "inv", Author: "model",
		Content: json.RawMessage(`{"parts":[{"text":"something else"}]}`)}
	before = e.dump()
	err := e.svc.AppendEvent(ctx, lost, other)
	require.ErrorIs(t, err, service.ErrAlreadyExists)
	require.EqualError(t, err, "adksession: already exists: event ev-1: session s of app app, user u holds another event with this id")
	require.Equal(t, before, e.dump(), "a reused id writes nothing")

	got := e.getSess("app", "u", "s")
	require.Equal(t, 2, got.Events().Len())
	e.flushOnce()
	var rows, dead int
	require.NoError(t, e.db.QueryRow(`SELECT count(*) FROM events WHERE app_name = 'app'`).Scan(&rows))
	require.Equal(t, 2, rows)
	for shard := range e.keys.Shards() {
		n, err := e.rdb.LLen(ctx, e.keys.ShardKeys(shard).Dead).Result()
		require.NoError(t, err)
		dead += int(n)
	}
	require.Zero(t, dead)
}

// testEventIDRetryFinishesAppStep: a writer that stored an event and died
// (or timed out) before its app: step leaves the event without its app:
// keys; the caller's retry of the same event is answered with the stored
// event and does the app: step (once), with no database to repair it.
func testEventIDRetryFinishesAppStep(t *testing.T, url string) {
	e := newWB(t, url, "", nil)
	ctx := wbCtx(t)
	sess := e.create(e.svc, "app", "u", "s", nil)
	ev := &service.Event{ID: "ev-1", InvocationID: "inv", Author: "model",
		Actions: service.EventActions{StateDelta: map[string]any{"n": 1, "app:a": "from ev-1"}}}
	require.NoError(t, e.svc.AppendEvent(ctx, sess, ev.Clone()))
	// Undo the app: step, as if the writer had died between its two scripts.
	app := e.keys.App("app")
	require.NoError(t, e.rdb.HDel(ctx, app.State, "s:a").Err())
	require.NoError(t, e.rdb.Del(ctx, app.Applied).Err())
	require.NotContains(t, stateMap(e.getSess("app", "u", "s")), "app:a")

	retry := ev.Clone()
	require.NoError(t, e.svc.AppendEvent(ctx, e.getSess("app", "u", "s"), retry))
	got := e.getSess("app", "u", "s")
	require.Equal(t, "from ev-1", stateMap(got)["app:a"])
	require.Equal(t, 1, got.Events().Len())
	rev := e.hash(app.State)["m:rev"]
	require.NoError(t, e.svc.AppendEvent(ctx, e.getSess("app", "u", "s"), ev.Clone()))
	require.Equal(t, rev, e.hash(app.State)["m:rev"], "a second retry applies nothing")
}

// testEventIDFromDatabase: once the session's older events are only in the
// database (trimmed from Redis after a flush), a retried event id is found
// there: same event, the stored timestamp; another event,
// ErrAlreadyExists. Postgres and Redis agree on the count.
func testEventIDFromDatabase(t *testing.T, url string) {
	e := newWB(t, url, testenv.FreshDatabase(t), func(c *service.Config) { c.MaxCachedEvents = 3; c.DisableFlusher = true })
	ctx := wbCtx(t)
	sess := e.create(e.svc, "app", "u", "s", nil)
	var sent []*service.Event
	for i := range 10 {
		ev := &service.Event{ID: fmt.Sprintf("ev-%d", i), InvocationID: "inv", Author: "model",
			Actions: service.EventActions{StateDelta: map[string]any{"i": i}}}
		require.NoError(t, e.svc.AppendEvent(ctx, sess, ev))
		sent = append(sent, ev)
	}
	e.flushOnce()
	h := e.hash(e.keys.Session("app", "u", "s").Session)
	require.Equal(t, []string{"8", "3"}, []string{h["m:first"], h["m:cnt"]}, "events 1-7 trimmed from Redis")

	again := &service.Event{ID: "ev-1", InvocationID: "inv", Author: "model",
		Actions: service.EventActions{StateDelta: map[string]any{"i": 1}}}
	before := e.dump()
	require.NoError(t, e.svc.AppendEvent(ctx, sess, again))
	require.Equal(t, sent[1].Timestamp, again.Timestamp)
	require.Equal(t, before, e.dump())

	err := e.svc.AppendEvent(ctx, sess, &service.Event{ID: "ev-2", InvocationID: "inv", Author: "other"})
	require.ErrorIs(t, err, service.ErrAlreadyExists)
	require.Equal(t, before, e.dump())

	// A new id still appends (the database was asked, and does not hold it).
	require.NoError(t, e.svc.AppendEvent(ctx, sess, &service.Event{ID: "ev-new", InvocationID: "inv", Author: "model"}))
	e.flushOnce()
	var rows int
	require.NoError(t, e.db.QueryRow(`SELECT count(*) FROM events WHERE app_name = 'app'`).Scan(&rows))
	require.Equal(t, 11, rows)
	require.Equal(t, "11", e.hash(e.keys.Session("app", "u", "s").Session)["m:rev"])
}

// testEventIDAcrossSessions: two sessions may use the same event id; each
// event's app: delta is applied, once (the dedupe id names the session).
func testEventIDAcrossSessions(t *testing.T, url string) {
	e := newWB(t, url, "", nil)
	ctx := wbCtx(t)
	s1 := e.create(e.svc, "app", "u1", "s", nil)
	s2 := e.create(e.svc, "app", "u2", "s", nil)
	require.NoError(t, e.svc.AppendEvent(ctx, s1, &service.Event{ID: "same", InvocationID: "i", Author: "a",
		Actions: service.EventActions{StateDelta: map[string]any{"app:who": "u1", "app:n1": 1}}}))
	require.NoError(t, e.svc.AppendEvent(ctx, s2, &service.Event{ID: "same", InvocationID: "i", Author: "a",
		Actions: service.EventActions{StateDelta: map[string]any{"app:who": "u2", "app:n2": 2}}}))
	h := e.hash(e.keys.App("app").State)
	require.Equal(t, `"u2"`, h["s:who"])
	require.Equal(t, "1", h["s:n1"])
	require.Equal(t, "2", h["s:n2"])
	require.Equal(t, "2", h["m:rev"])
}

// testHandleOfDeletedIncarnation: a handle read before Delete and a
// Create of the same id is stale, in both append modes: nothing written.
func testHandleOfDeletedIncarnation(t *testing.T, url string) {
	for _, concurrent := range []bool{false, true} {
		e := newWB(t, url, testenv.FreshDatabase(t), func(c *service.Config) { c.ConcurrentAppends = concurrent; c.DisableFlusher = true })
		ctx := wbCtx(t)
		old := e.create(e.svc, "app", "u", "s", map[string]any{"k": "old"})
		e.delete(e.svc, "app", "u", "s")
		e.create(e.svc, "app", "u", "s", map[string]any{"k": "new"})
		before := e.dump()
		err := e.svc.AppendEvent(ctx, old, &service.Event{InvocationID: "i", Author: "a",
			Actions: service.EventActions{StateDelta: map[string]any{"k": "from the old handle"}}})
		require.ErrorIs(t, err, service.ErrStaleSession, "concurrent=%v", concurrent)
		require.Equal(t, before, e.dump(), "concurrent=%v: nothing written", concurrent)
		got := e.getSess("app", "u", "s")
		require.Equal(t, "new", stateMap(got)["k"])
		require.Zero(t, got.Events().Len())
	}
}

// testStoredTimestampInJSON: the time an event is stored under (moved to
// the previous event's + 1 µs when not after it, for appends and rewinds)
// is the time in its JSON, in Redis and in the database, and integers reach
// Redis as digits (a far but valid timestamp).
func testStoredTimestampInJSON(t *testing.T, url string) {
	e := newWB(t, url, testenv.FreshDatabase(t), nil)
	ctx := wbCtx(t)
	sess := e.create(e.svc, "app", "u", "s", map[string]any{"k": 0})
	far := time.Date(2199, 12, 31, 23, 59, 59, 999998000, time.UTC)
	require.NoError(t, e.svc.AppendEvent(ctx, sess, &service.Event{InvocationID: "i1", Author: "a", Timestamp: far,
		Actions: service.EventActions{StateDelta: map[string]any{"k": 1}}}))
	h := e.hash(e.keys.Session("app", "u", "s").Session)
	require.Equal(t, strconv.FormatInt(far.UnixMicro(), 10), h["m:ut"], "digits, not exponent form")
	// Not after the previous event: moved to previous + 1 µs.
	require.NoError(t, e.svc.AppendEvent(ctx, sess, &service.Event{InvocationID: "i2", Author: "a",
		Actions: service.EventActions{StateDelta: map[string]any{"k": 2}}}))
	rw, err := e.svc.Rewind(ctx, &service.RewindRequest{AppName: "app", UserID: "u", SessionID: "s", BeforeInvocationID: "i2"})
	require.NoError(t, err)
	require.Equal(t, far.Add(2*time.Microsecond), rw.Timestamp)

	zs, err := e.rdb.ZRangeWithScores(ctx, e.keys.Session("app", "u", "s").Events, 0, -1).Result()
	require.NoError(t, err)
	require.Len(t, zs, 3)
	for i, z := range zs {
		_, js, _ := strings.Cut(z.Member.(string), ":")
		var head struct {
			Timestamp json.Number `json:"timestamp"`
		}
		require.NoError(t, json.Unmarshal([]byte(js), &head))
		require.Equal(t, epochString(int64(z.Score)), head.Timestamp.String(), "event %d: JSON timestamp vs score", i)
		require.Equal(t, far.Add(time.Duration(i)*time.Microsecond).UnixMicro(), int64(z.Score))
	}
	e.flush(e.svc)
	var n int
	require.NoError(t, e.db.QueryRow(`SELECT count(*) FROM events WHERE app_name = 'app'
AND (event_data->>'timestamp')::numeric * 1000 <> round(extract(epoch FROM "timestamp")::numeric * 1000000)`).Scan(&n))
	require.Zero(t, n, "event_data timestamps (ms) that differ from the column")
	require.NoError(t, e.db.QueryRow(`SELECT count(*) FROM events WHERE app_name = 'app'`).Scan(&n))
	require.Equal(t, 3, n)
	got := e.getSess("app", "u", "s")
	require.Equal(t, map[string]any{"k": float64(1)}, stateMap(got), "rewound before i2")
}

// epochString is µs as float epoch seconds with six decimals (the API form).
func epochString(us int64) string {
	return fmt.Sprintf("%d.%06d", us/1e6, us%1e6)
}

func (e *wbEnv) hash(key string) map[string]string {
	e.t.Helper()
	h, err := e.rdb.HGetAll(wbCtx(e.t), key).Result()
	require.NoError(e.t, err)
	return h
}

// testReadGuards: flushed.lua moves a session's read guard when the
// session's keys get a TTL and when its flushed tombstone goes, and the
// user's when the user hash gets a TTL and when one of the user's
// tombstones goes; hydrate.lua, hydrate_state.lua and hydrate_index.lua put
// a cold read back only while the guard holds the value read before the
// database (the field's counter and the hash's epoch, which a FLUSHALL
// drops), else answer -11 with nothing written (docs/design.md, "Cold
// reads").
func testReadGuards(t *testing.T, url string) {
	e := newWB(t, url, testenv.FreshDatabase(t), func(c *service.Config) { c.DisableFlusher = true })
	ctx := wbCtx(t)
	k := e.keys.Session("app", "u", "s")
	guards := e.keys.ShardKeys(k.Shard).Guards
	sf, uf := cache.GuardField(base.SessionRef{App: "app", User: "u", ID: "s"}), cache.GuardField(base.SessionRef{App: "app", User: "u"})
	require.NotEqual(t, sf, uf, "distinct fields, so that each move is seen")
	field := func(f string) string { return e.rdb.HGet(ctx, guards, f).Val() }

	sess := e.create(e.svc, "app", "u", "s", map[string]any{"user:n": 1})
	e.mustAppend(e.svc, sess, "inv", "hi", map[string]any{"k": 1})
	s0, u0 := field(sf), field(uf)
	e.flushOnce()
	s1, u1 := field(sf), field(uf)
	require.NotEqual(t, s0, s1, "the session's keys got a TTL")
	require.NotEqual(t, u0, u1, "the user hash got a TTL")
	e.delete(e.svc, "app", "u", "s")
	e.flushOnce()
	require.NotEqual(t, s1, field(sf), "the session's tombstone went")
	require.NotEqual(t, u1, field(uf), "a tombstone of the user went")

	// Each script, for keys Redis does not hold: refused while the guard
	// moved, with nothing written; run with the value it holds.
	h := e.keys.Session("app", "w", "h")
	hg := e.keys.ShardKeys(h.Shard).Guards
	hf, wf := cache.GuardField(base.SessionRef{App: "app", User: "w", ID: "h"}), cache.GuardField(base.SessionRef{App: "app", User: "w"})
	require.NoError(t, e.rdb.HIncrBy(ctx, hg, hf, 3).Err())
	require.NoError(t, e.rdb.HIncrBy(ctx, hg, wf, 5).Err())
	require.NoError(t, e.rdb.HSet(ctx, hg, "epoch", "E1").Err())
	now := e.rdb.HGetAll(ctx, hg).Val()
	// The event hydrate.lua puts back, staged as cache.Store.Hydrate stages it in its MULTI.
	hs := e.keys.Stage("app", "w", "h")
	require.NoError(t, e.rdb.ZAdd(ctx, hs.Events, redis.Z{Score: 1000, Member: `1:{"id":"e1"}`}).Err())
	require.NoError(t, e.rdb.ZAdd(ctx, hs.EventIDs, redis.Z{Score: 1, Member: "e1"}).Err())
	for f, v := range now {
		now[f] = v + "@E1"
	}
	for _, c := range []struct {
		name   string
		script string
		keys   []string
		args   func(field, value string) []any
	}{
		{"hydrate", lua.Hydrate, []string{h.Session, h.Events, h.EventIDs, h.Undo, hg, h.Temp, h.UserIndex, hs.Events, hs.EventIDs}, func(f, v string) []any {
			return []any{"1", "1", "1000", "1", "60000", "0", "1", f, v, "h"}
		}},
		{"hydrate_state", lua.HydrateState, []string{h.User, hg}, func(f, v string) []any { return []any{"1", "0", "60000", "0", f, v} }},
		{"hydrate_index", lua.HydrateIndex, []string{h.UserIndex, hg, h.Session}, func(f, v string) []any { return []any{"60000", f, v, "h", "1000"} }},
	} {
		f := wf
		if c.script == lua.Hydrate {
			f = hf
		}
		// Read before a move, or before a FLUSHALL (the same counter, another
		// epoch or none).
		for _, stale := range []string{"", "1@E1", "2@E1", "@E1", strings.Split(now[f], "@")[0] + "@E0", strings.Split(now[f], "@")[0] + "@"} {
			before := e.dump()
			n, err := e.rdb.Eval(ctx, c.script, c.keys, c.args(f, stale)...).Int64()
			require.NoError(t, err, c.name)
			require.EqualValues(t, -11, n, "%s with the guard read as %q (now %s)", c.name, stale, now[f])
			require.Equal(t, before, e.dump(), "%s: nothing written", c.name)
		}
		n, err := e.rdb.Eval(ctx, c.script, c.keys, c.args(f, now[f])...).Int64()
		require.NoError(t, err, c.name)
		require.EqualValues(t, 1, n, c.name)
	}
	require.Equal(t, "1", e.hash(h.Session)["m:rev"])
	require.Equal(t, "1", e.hash(h.User)["m:rev"])
	score, err := e.rdb.ZScore(ctx, h.UserIndex, "h").Result()
	require.NoError(t, err)
	require.EqualValues(t, 1000, score)
}
