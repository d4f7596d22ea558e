package integration

// The contract suite of the Redis-only core (README.md, docs/design.md): one
// suite, run against a real standalone Redis and a real 3-master Redis
// Cluster. Every subtest has its own namespace, so tests share the servers
// without seeing each other and never flush anything.

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/adksession/adksession/cache"
	"github.com/adksession/adksession/integration/testenv"
	"github.com/adksession/adksession/service"
)

func TestContractStandalone(t *testing.T) {
	t.Parallel()
	runContract(t, testenv.RedisURL(t))
}

func TestContractCluster(t *testing.T) {
	t.Parallel()
	runContract(t, testenv.ClusterURL(t))
}

// env is one subtest's view of a Redis deployment (Redis only, unless tweak
// names a database): a deployment, and the namespace and kind of Redis.
type env struct {
	*deployment
	t       *testing.T
	url     string
	ns      string
	cluster bool
}

func newEnv(t *testing.T, redisURL string, tweak func(*service.Config)) *env {
	t.Helper()
	d := newDeployment(t, "ct-", service.Config{RedisURL: redisURL}, tweak)
	_, cluster := d.rdb.(*redis.ClusterClient)
	return &env{deployment: d, t: t, url: redisURL, ns: d.cfg.Namespace, cluster: cluster}
}

func ctxT(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	t.Cleanup(cancel)
	return c
}

func (e *env) create(app, user, sid string, state map[string]any) *service.Session {
	e.t.Helper()
	resp, err := e.svc.Create(ctxT(e.t), &service.CreateRequest{AppName: app, UserID: user, SessionID: sid, State: state})
	require.NoError(e.t, err)
	return resp.Session
}

func (e *env) get(req *service.GetRequest) *service.Session {
	e.t.Helper()
	resp, err := e.svc.Get(ctxT(e.t), req)
	require.NoError(e.t, err)
	return resp.Session
}

func (e *env) getS(app, user, sid string) *service.Session {
	e.t.Helper()
	return e.get(&service.GetRequest{AppName: app, UserID: user, SessionID: sid})
}

func (e *env) append(sess *service.Session, ev *service.Event) {
	e.t.Helper()
	require.NoError(e.t, e.svc.AppendEvent(ctxT(e.t), sess, ev))
}

// stateOf is a session's merged state as a map.
func stateOf(s *service.Session) map[string]any {
	m := map[string]any{}
	for k, v := range s.State().All() {
		m[k] = v
	}
	return m
}

func eventsOf(s *service.Session) []*service.Event {
	var out []*service.Event
	for ev := range s.Events().All() {
		out = append(out, ev)
	}
	return out
}

// storedEvents reads a session's events zset: the JSON of each member, in order.
func (e *env) storedEvents(app, user, sid string) []string {
	e.t.Helper()
	ms, err := e.rdb.ZRange(ctxT(e.t), e.keys.Session(app, user, sid).Events, 0, -1).Result()
	require.NoError(e.t, err)
	out := make([]string, len(ms))
	for i, m := range ms {
		_, js, ok := strings.Cut(m, ":")
		require.True(e.t, ok, "event member %q has no sequence number", m)
		out[i] = js
	}
	return out
}

func (e *env) hash(key string) map[string]string {
	e.t.Helper()
	h, err := e.rdb.HGetAll(ctxT(e.t), key).Result()
	require.NoError(e.t, err)
	return h
}

func (e *env) exists(key string) bool {
	e.t.Helper()
	n, err := e.rdb.Exists(ctxT(e.t), key).Result()
	require.NoError(e.t, err)
	return n == 1
}

// scanKeys lists every key of the namespace (on every master of a cluster).
func (e *env) scanKeys() []string {
	e.t.Helper()
	ctx := ctxT(e.t)
	var mu sync.Mutex
	var keys []string
	scan := func(ctx context.Context, c *redis.Client) error {
		it := c.Scan(ctx, 0, e.ns+"*", 1000).Iterator()
		for it.Next(ctx) {
			mu.Lock()
			keys = append(keys, it.Val())
			mu.Unlock()
		}
		return it.Err()
	}
	switch c := e.rdb.(type) {
	case *redis.ClusterClient:
		require.NoError(e.t, c.ForEachMaster(ctx, scan))
	case *redis.Client:
		require.NoError(e.t, scan(ctx, c))
	default:
		e.t.Fatalf("unexpected client %T", e.rdb)
	}
	return keys
}

// dumpNamespace is every key of the namespace with its serialized value.
func (e *env) dumpNamespace() map[string]string {
	e.t.Helper()
	out := map[string]string{}
	for _, k := range e.scanKeys() {
		v, err := e.rdb.Dump(ctxT(e.t), k).Result()
		require.NoError(e.t, err, "DUMP %s", k)
		out[k] = v
	}
	return out
}

func runContract(t *testing.T, redisURL string) {
	t.Run("Scopes", func(t *testing.T) { t.Parallel(); testScopes(t, redisURL) })
	t.Run("Create", func(t *testing.T) { t.Parallel(); testCreate(t, redisURL) })
	t.Run("AppendEvent", func(t *testing.T) { t.Parallel(); testAppend(t, redisURL) })
	t.Run("TempState", func(t *testing.T) { t.Parallel(); testTempState(t, redisURL) })
	t.Run("Timestamps", func(t *testing.T) { t.Parallel(); testTimestamps(t, redisURL) })
	t.Run("Windows", func(t *testing.T) { t.Parallel(); testWindows(t, redisURL) })
	t.Run("StaleHandle", func(t *testing.T) { t.Parallel(); testStaleHandle(t, redisURL) })
	t.Run("ConcurrentSharedHandle", func(t *testing.T) { t.Parallel(); testConcurrentSharedHandle(t, redisURL) })
	t.Run("ConcurrentStaleHandles", func(t *testing.T) { t.Parallel(); testConcurrentStaleHandles(t, redisURL) })
	t.Run("ConcurrentUserState", func(t *testing.T) { t.Parallel(); testConcurrentUserState(t, redisURL) })
	t.Run("ClusterSafeKeys", func(t *testing.T) { t.Parallel(); testClusterSafeKeys(t, redisURL) })
	t.Run("Slots", func(t *testing.T) { t.Parallel(); testSlots(t, redisURL) })
	t.Run("BadInput", func(t *testing.T) { t.Parallel(); testBadInput(t, redisURL) })
	t.Run("BadInputDefaults", func(t *testing.T) { t.Parallel(); testBadInputDefaults(t, redisURL) })
	t.Run("BadInputHTTP", func(t *testing.T) { t.Parallel(); testBadInputHTTP(t, redisURL) })
	t.Run("WindowBounds", func(t *testing.T) { t.Parallel(); testWindowBounds(t, redisURL) })
	t.Run("ListUser", func(t *testing.T) { t.Parallel(); testListUser(t, redisURL) })
	t.Run("ListApp", func(t *testing.T) { t.Parallel(); testListApp(t, redisURL) })
	t.Run("Delete", func(t *testing.T) { t.Parallel(); testDelete(t, redisURL) })
	t.Run("EventFidelity", func(t *testing.T) { t.Parallel(); testEventFidelity(t, redisURL) })
}

// ---------------------------------------------------------------------------------------------------------------
// 1. Scopes

func testScopes(t *testing.T, url string) {
	e := newEnv(t, url, nil)
	const app = "app"
	s1 := e.create(app, "u1", "s1", map[string]any{"a": 1, "user:u": 2, "app:p": 3, "temp:t": 4})
	want := map[string]any{"a": float64(1), "user:u": float64(2), "app:p": float64(3)}
	require.Equal(t, want, stateOf(s1), "state of the created handle")
	require.Equal(t, want, stateOf(e.getS(app, "u1", "s1")), "state read back")
	_, err := s1.State().Get("temp:t")
	require.ErrorIs(t, err, service.ErrStateKeyNotExist)

	// Storage keeps each scope in its own hash, without the prefix.
	k := e.keys.Session(app, "u1", "s1")
	sh := e.hash(k.Session)
	require.Equal(t, "1", sh["s:a"])
	for f := range sh {
		require.NotContains(t, f, "user:", "session hash field %s", f)
		require.NotContains(t, f, "app:", "session hash field %s", f)
		require.NotContains(t, f, "temp:", "session hash field %s", f)
	}
	require.Equal(t, "2", e.hash(k.User)["s:u"])
	require.Equal(t, "3", e.hash(e.keys.App(app).State)["s:p"])
	require.False(t, e.exists(k.Temp), "temp: keys of a create are dropped")

	// Another session of the same user sees user: and app: keys, not the session's.
	e.create(app, "u1", "s2", nil)
	require.Equal(t, map[string]any{"user:u": float64(2), "app:p": float64(3)}, stateOf(e.getS(app, "u1", "s2")))

	// Another user of the app sees app: keys only.
	e.create(app, "u2", "s1", nil)
	require.Equal(t, map[string]any{"app:p": float64(3)}, stateOf(e.getS(app, "u2", "s1")))

	// Another app sees nothing.
	e.create("other", "u1", "s1", nil)
	require.Empty(t, stateOf(e.getS("other", "u1", "s1")))

	// Prefix order: app:user:x is the app key user:x.
	e.append(s1, &service.Event{Author: "agent", InvocationID: "i1", Actions: service.EventActions{
		StateDelta: map[string]any{"app:user:x": "ax", "user:app:y": "uy"},
	}})
	require.Equal(t, `"ax"`, e.hash(e.keys.App(app).State)["s:user:x"])
	require.NotContains(t, e.hash(k.User), "s:x")
	require.Equal(t, `"uy"`, e.hash(k.User)["s:app:y"])
	got := stateOf(e.getS(app, "u2", "s1"))
	require.Equal(t, "ax", got["app:user:x"], "app key user:x is shared with other users")
	require.NotContains(t, got, "user:app:y")
	require.NotContains(t, got, "user:x")

	// JSON null is stored as null and read back as a present nil.
	s3 := e.create(app, "u1", "s3", map[string]any{"n": nil, "user:n": nil})
	require.Equal(t, "null", e.hash(e.keys.Session(app, "u1", "s3").Session)["s:n"])
	require.Equal(t, "null", e.hash(k.User)["s:n"])
	e.append(s3, &service.Event{Author: "agent", Actions: service.EventActions{StateDelta: map[string]any{"m": nil}}})
	require.Equal(t, "null", e.hash(e.keys.Session(app, "u1", "s3").Session)["s:m"])
	back := e.getS(app, "u1", "s3")
	for _, key := range []string{"n", "user:n", "m"} {
		v, err := back.State().Get(key)
		require.NoError(t, err, "key %s", key)
		require.Nil(t, v, "key %s", key)
	}
	ev := eventsOf(back)[0]
	require.Contains(t, ev.Actions.StateDelta, "m")
	require.Nil(t, ev.Actions.StateDelta["m"])

	// State keys that look like the hashes' own fields are plain state.
	s4 := e.create(app, "u3", "s4", map[string]any{"m:rev": "r", "m:del": "1", "s:x": 1, "user:m:rev": 7})
	e.append(s4, &service.Event{Author: "a", Actions: service.EventActions{StateDelta: map[string]any{"m:cnt": 9, "m:tinv": "t"}}})
	e.append(s4, &service.Event{Author: "b"})
	got4 := e.getS(app, "u3", "s4")
	require.Equal(t, 2, got4.Events().Len())
	st4 := stateOf(got4)
	require.Equal(t, map[string]any{"m:rev": "r", "m:del": "1", "s:x": float64(1), "user:m:rev": float64(7),
		"m:cnt": float64(9), "m:tinv": "t", "app:p": float64(3), "app:user:x": "ax"}, st4)
	us4, err := e.svc.GetUserState(ctxT(t), &service.UserStateRequest{AppName: app, UserID: "u3"})
	require.NoError(t, err)
	require.Equal(t, map[string]any{"m:rev": float64(7)}, us4)

	// GetUserState: keys without "user:".
	us, err := e.svc.GetUserState(ctxT(t), &service.UserStateRequest{AppName: app, UserID: "u1"})
	require.NoError(t, err)
	require.Equal(t, map[string]any{"u": float64(2), "app:y": "uy", "n": nil}, us)
	us, err = e.svc.GetUserState(ctxT(t), &service.UserStateRequest{AppName: app, UserID: "nobody"})
	require.NoError(t, err)
	require.Empty(t, us)
}

// ---------------------------------------------------------------------------------------------------------------
// 2. Create

func testCreate(t *testing.T, url string) {
	e := newEnv(t, url, nil)
	ctx := ctxT(t)

	s := e.create("app", "u", "", nil)
	id, err := uuid.Parse(s.ID())
	require.NoError(t, err, "generated id %q", s.ID())
	require.Equal(t, uuid.Version(4), id.Version())
	require.Equal(t, s.ID(), e.getS("app", "u", s.ID()).ID())
	require.True(t, e.exists(e.keys.Session("app", "u", s.ID()).Session))
	require.False(t, s.LastUpdateTime().IsZero(), "LastUpdateTime is the creation time before any event")
	require.WithinDuration(t, time.Now(), s.LastUpdateTime(), time.Minute)

	e.create("app", "u", "dup", map[string]any{"a": 1})
	before := e.hash(e.keys.Session("app", "u", "dup").Session)
	_, err = e.svc.Create(ctx, &service.CreateRequest{AppName: "app", UserID: "u", SessionID: "dup", State: map[string]any{"a": 2}})
	require.ErrorIs(t, err, service.ErrAlreadyExists)
	require.EqualError(t, err, "adksession: already exists: session dup of app app, user u")
	require.Equal(t, before, e.hash(e.keys.Session("app", "u", "dup").Session), "a refused create writes nothing")
	require.Equal(t, float64(1), stateOf(e.getS("app", "u", "dup"))["a"])

	// A known id under another user or app is not found.
	for _, req := range []*service.GetRequest{
		{AppName: "app", UserID: "u2", SessionID: "dup"},
		{AppName: "app2", UserID: "u", SessionID: "dup"},
		{AppName: "ap", UserID: "p:u", SessionID: "dup"},
	} {
		_, err := e.svc.Get(ctx, req)
		require.ErrorIs(t, err, service.ErrNotFound, "%+v", req)
		require.EqualError(t, err, "adksession: not found: session dup of app "+req.AppName+", user "+req.UserID)
	}

	// The same id under another user or app is another session.
	e.create("app", "u2", "dup", map[string]any{"a": 3})
	e.create("app2", "u", "dup", map[string]any{"a": 4})
	require.Equal(t, float64(3), stateOf(e.getS("app", "u2", "dup"))["a"])
	require.Equal(t, float64(4), stateOf(e.getS("app2", "u", "dup"))["a"])

	// 20 concurrent creates of one id: exactly one wins.
	const n = 20
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			_, errs[i] = e.svc.Create(ctx, &service.CreateRequest{AppName: "app", UserID: "u", SessionID: "race",
				State: map[string]any{"winner": i}})
		})
	}
	wg.Wait()
	won, lost := -1, 0
	for i, err := range errs {
		switch {
		case err == nil:
			require.Equal(t, -1, won, "two creates won: %d and %d", won, i)
			won = i
		case errors.Is(err, service.ErrAlreadyExists):
			lost++
		default:
			t.Fatalf("create %d: unexpected error %v", i, err)
		}
	}
	require.NotEqual(t, -1, won)
	require.Equal(t, n-1, lost)
	require.Equal(t, float64(won), stateOf(e.getS("app", "u", "race"))["winner"])
}

// ---------------------------------------------------------------------------------------------------------------
// 3. AppendEvent

func testAppend(t *testing.T, url string) {
	e := newEnv(t, url, nil)
	s := e.create("app", "u", "s", nil)
	k := e.keys.Session("app", "u", "s")

	ev := &service.Event{Author: "agent", InvocationID: "inv1", Actions: service.EventActions{
		StateDelta: map[string]any{"k": "v", "user:uk": "uv", "app:ak": "av"},
	}}
	e.append(s, ev)
	id, err := uuid.Parse(ev.ID)
	require.NoError(t, err, "assigned id %q", ev.ID)
	require.Equal(t, uuid.Version(4), id.Version())
	require.False(t, ev.Timestamp.IsZero())
	require.WithinDuration(t, time.Now(), ev.Timestamp, time.Minute)
	require.Equal(t, ev.Timestamp, s.LastUpdateTime())
	require.Equal(t, 1, s.Events().Len())
	require.Equal(t, ev.ID, s.Events().At(0).ID)
	require.Equal(t, map[string]any{"k": "v", "user:uk": "uv", "app:ak": "av"}, stateOf(s))

	got := e.getS("app", "u", "s")
	require.Equal(t, 1, got.Events().Len())
	require.Equal(t, ev.ID, got.Events().At(0).ID)
	require.Equal(t, ev.Timestamp, got.Events().At(0).Timestamp)
	require.Equal(t, ev.Timestamp, got.LastUpdateTime())
	require.Equal(t, stateOf(s), stateOf(got))
	score, err := e.rdb.ZScore(ctxT(t), k.Events, "1:"+e.storedEvents("app", "u", "s")[0]).Result()
	require.NoError(t, err)
	require.Equal(t, float64(ev.Timestamp.UnixMicro()), score)

	// A partial event is returned untouched and stored nowhere.
	before := e.dumpNamespace()
	partial := &service.Event{Author: "agent", InvocationID: "inv1", Partial: true, Actions: service.EventActions{
		StateDelta: map[string]any{"p": 1, "temp:p": 1, "user:p": 1, "app:p": 1},
	}}
	e.append(s, partial)
	require.Empty(t, partial.ID)
	require.True(t, partial.Timestamp.IsZero())
	require.Len(t, partial.Actions.StateDelta, 4)
	require.Equal(t, before, e.dumpNamespace(), "a partial event writes nothing")
	require.Equal(t, 1, s.Events().Len())
	require.NotContains(t, stateOf(s), "p")
	require.Equal(t, 1, e.getS("app", "u", "s").Events().Len())

	// A caller-chosen id and timestamp are kept.
	ts := ev.Timestamp.Add(time.Second).Truncate(time.Microsecond)
	ev2 := &service.Event{ID: "my-id", Author: "user", InvocationID: "inv1", Timestamp: ts}
	e.append(s, ev2)
	require.Equal(t, "my-id", ev2.ID)
	require.Equal(t, ts.UTC(), ev2.Timestamp)
	got = e.getS("app", "u", "s")
	require.Equal(t, []string{ev.ID, "my-id"}, []string{got.Events().At(0).ID, got.Events().At(1).ID})
	require.Equal(t, ts.UTC(), got.LastUpdateTime())
	require.Equal(t, ts.UTC(), s.LastUpdateTime())

	// Appending to a session that does not exist (deleted under the handle).
	require.NoError(t, e.svc.Delete(ctxT(t), &service.DeleteRequest{AppName: "app", UserID: "u", SessionID: "s"}))
	err = e.svc.AppendEvent(ctxT(t), s, &service.Event{Author: "agent"})
	require.ErrorIs(t, err, service.ErrNotFound)
	require.False(t, e.exists(k.Session))
	require.False(t, e.exists(k.Events))
}

func testTempState(t *testing.T, url string) {
	e := newEnv(t, url, nil)
	other := e.open(e.cfg) // another process on the same Redis and namespace
	ctx := ctxT(t)
	s := e.create("app", "u", "s", nil)
	k := e.keys.Session("app", "u", "s")

	ev := &service.Event{Author: "agent", InvocationID: "X", Actions: service.EventActions{
		StateDelta: map[string]any{"k": 1, "temp:t": "tv", "temp:obj": map[string]any{"a": []any{1.5, "x"}}},
	}}
	e.append(s, ev)
	require.Equal(t, map[string]any{"k": 1}, ev.Actions.StateDelta, "temp: keys are removed from the event")
	require.Equal(t, "tv", stateOf(s)["temp:t"], "the handle that wrote temp: keys sees them")
	require.Equal(t, map[string]any{"a": []any{1.5, "x"}}, stateOf(s)["temp:obj"])

	stored := e.storedEvents("app", "u", "s")
	require.Len(t, stored, 1)
	require.NotContains(t, stored[0], "temp:")
	var sj map[string]any
	require.NoError(t, json.Unmarshal([]byte(stored[0]), &sj))
	require.Equal(t, map[string]any{"k": float64(1)}, sj["actions"].(map[string]any)["stateDelta"])
	require.Equal(t, `"tv"`, e.hash(k.Temp)["temp:t"])
	ttl, err := e.rdb.PTTL(ctx, k.Temp).Result()
	require.NoError(t, err)
	require.Greater(t, ttl, time.Duration(0), "temp state has a TTL (safety net)")
	require.LessOrEqual(t, ttl, time.Hour)

	getInv := func(svc *service.Service, inv string) map[string]any {
		t.Helper()
		r, err := svc.Get(ctx, &service.GetRequest{AppName: "app", UserID: "u", SessionID: "s", InvocationID: inv})
		require.NoError(t, err)
		for _, ev := range eventsOf(r.Session) {
			require.NotContains(t, ev.Actions.StateDelta, "temp:t")
		}
		return stateOf(r.Session)
	}
	require.Equal(t, "tv", getInv(other, "X")["temp:t"], "another process sees invocation X's temp: keys")
	require.Equal(t, "tv", getInv(e.svc, "X")["temp:t"])
	require.NotContains(t, getInv(other, ""), "temp:t", "a plain Get never shows temp: keys")
	require.NotContains(t, getInv(other, "Y"), "temp:t", "another invocation does not see X's temp: keys")

	// A second event of X through the other process's handle adds to X's temp state.
	h2 := e.getInvSession(other, "X")
	e2 := &service.Event{Author: "agent", InvocationID: "X", Actions: service.EventActions{StateDelta: map[string]any{"temp:u": 2}}}
	require.NoError(t, other.AppendEvent(ctx, h2, e2))
	st := getInv(e.svc, "X")
	require.Equal(t, "tv", st["temp:t"])
	require.Equal(t, float64(2), st["temp:u"])

	// EndInvocation trims them, everywhere.
	require.NoError(t, other.EndInvocation(ctx, h2, "X"))
	require.False(t, e.exists(k.Temp))
	require.NotContains(t, getInv(e.svc, "X"), "temp:t")
	require.NotContains(t, stateOf(h2), "temp:t")
	require.NotContains(t, stateOf(h2), "temp:u")

	// The first event of another invocation trims the previous one's temp state.
	s = e.getS("app", "u", "s")
	e.append(s, &service.Event{Author: "agent", InvocationID: "Y", Actions: service.EventActions{StateDelta: map[string]any{"temp:y": 1}}})
	require.Equal(t, float64(1), getInv(other, "Y")["temp:y"])
	e.append(s, &service.Event{Author: "agent", InvocationID: "Z", Actions: service.EventActions{StateDelta: map[string]any{"temp:z": 1}}})
	require.NotContains(t, getInv(other, "Y"), "temp:y")
	require.NotContains(t, stateOf(s), "temp:y", "the handle drops the previous invocation's temp: keys")
	require.Equal(t, float64(1), stateOf(s)["temp:z"])
	zs := getInv(other, "Z")
	require.Equal(t, float64(1), zs["temp:z"])
	require.NotContains(t, zs, "temp:y")
	require.Equal(t, map[string]string{"temp:z": "1"}, e.hash(k.Temp))
	for _, js := range e.storedEvents("app", "u", "s") {
		require.NotContains(t, js, "temp:")
	}

	// Ending an invocation that does not own the temp state leaves it alone.
	require.NoError(t, e.svc.EndInvocation(ctx, s, "Y"))
	require.Equal(t, float64(1), getInv(other, "Z")["temp:z"])
	require.Equal(t, float64(1), stateOf(s)["temp:z"])
}

func (e *env) getInvSession(svc *service.Service, inv string) *service.Session {
	e.t.Helper()
	r, err := svc.Get(ctxT(e.t), &service.GetRequest{AppName: "app", UserID: "u", SessionID: "s", InvocationID: inv})
	require.NoError(e.t, err)
	return r.Session
}

func testTimestamps(t *testing.T, url string) {
	e := newEnv(t, url, nil)
	s := e.create("app", "u", "s", nil)
	k := e.keys.Session("app", "u", "s")

	base := time.Date(2030, 1, 2, 3, 4, 5, 123456789, time.UTC)
	ev1 := &service.Event{Author: "a", Timestamp: base}
	e.append(s, ev1)
	want1 := base.Truncate(time.Microsecond)
	require.Equal(t, want1, ev1.Timestamp, "timestamps keep microseconds")

	// Not after the previous event: moved to previous + 1µs.
	ev2 := &service.Event{Author: "b", Timestamp: base.Add(-time.Hour)}
	e.append(s, ev2)
	require.Equal(t, want1.Add(time.Microsecond), ev2.Timestamp)
	ev3 := &service.Event{Author: "c", Timestamp: ev2.Timestamp}
	e.append(s, ev3)
	require.Equal(t, want1.Add(2*time.Microsecond), ev3.Timestamp)
	ev4 := &service.Event{Author: "d", Timestamp: want1.Add(time.Second + 7*time.Microsecond)}
	e.append(s, ev4)
	require.Equal(t, want1.Add(time.Second+7*time.Microsecond), ev4.Timestamp)

	got := e.getS("app", "u", "s")
	evs := eventsOf(got)
	require.Len(t, evs, 4)
	for i, w := range []*service.Event{ev1, ev2, ev3, ev4} {
		require.Equal(t, w.ID, evs[i].ID, "append order")
		require.Equal(t, w.Timestamp, evs[i].Timestamp, "event %d", i)
	}
	require.Equal(t, ev4.Timestamp, got.LastUpdateTime())
	require.Equal(t, ev4.Timestamp, s.LastUpdateTime())
	require.Equal(t, jsonOf(t, evs), jsonOf(t, eventsOf(s)), "the handle holds the same events as a Get")

	// What is in Redis: scores in µs, the JSON timestamp in seconds with 6 decimals.
	zs, err := e.rdb.ZRangeWithScores(ctxT(t), k.Events, 0, -1).Result()
	require.NoError(t, err)
	for i, z := range zs {
		require.Equal(t, float64(evs[i].Timestamp.UnixMicro()), z.Score)
	}
	stored := e.storedEvents("app", "u", "s")
	require.Contains(t, stored[0], fmt.Sprintf(`"timestamp":%d.123456`, base.Unix()))
	require.Contains(t, stored[1], fmt.Sprintf(`"timestamp":%d.123457`, base.Unix()))
}

// ---------------------------------------------------------------------------------------------------------------
// 4. Windows

func testWindows(t *testing.T, url string) {
	e := newEnv(t, url, nil)
	s := e.create("app", "u", "s", map[string]any{"init": true})
	base := time.Date(2031, 5, 6, 7, 8, 9, 0, time.UTC)
	at := func(i int) time.Time { return base.Add(time.Duration(i) * time.Second) }
	const n = 50
	for i := range n {
		e.append(s, &service.Event{Author: fmt.Sprintf("e%d", i), Timestamp: at(i), Actions: service.EventActions{
			StateDelta: map[string]any{fmt.Sprintf("k%d", i): i, "last": i},
		}})
	}
	fullState := stateOf(s)
	require.Len(t, fullState, n+2)

	authors := func(s *service.Session) []string {
		var out []string
		for _, ev := range eventsOf(s) {
			out = append(out, ev.Author)
		}
		return out
	}
	span := func(from, to int) []string { // authors e<from> .. e<to-1>
		var out []string
		for i := from; i < to; i++ {
			out = append(out, fmt.Sprintf("e%d", i))
		}
		return out
	}
	for _, c := range []struct {
		name  string
		after time.Time
		num   int
		want  []string
	}{
		{"all", time.Time{}, 0, span(0, n)},
		{"after inclusive", at(10), 0, span(10, n)},
		{"after between events", at(10).Add(time.Microsecond), 0, span(11, n)},
		{"after the first", at(0), 0, span(0, n)},
		{"after before all", base.Add(-time.Hour), 0, span(0, n)},
		{"after the last", at(n - 1), 0, span(n-1, n)},
		{"after all", at(n), 0, nil},
		{"recent", time.Time{}, 5, span(n-5, n)},
		{"recent 1", time.Time{}, 1, span(n-1, n)},
		{"recent more than all", time.Time{}, 100, span(0, n)},
		{"recent of after", at(10), 5, span(n-5, n)},
		{"after limits recent", at(47), 5, span(47, n)},
		{"after inclusive limits recent", at(45), 10, span(45, n)},
		{"after all, recent", at(n), 3, nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			got := e.get(&service.GetRequest{AppName: "app", UserID: "u", SessionID: "s", After: c.after, NumRecentEvents: c.num})
			require.Equal(t, c.want, authors(got))
			require.Equal(t, fullState, stateOf(got), "state is the full state whatever the window")
			require.Equal(t, at(n-1), got.LastUpdateTime())
			for _, ev := range eventsOf(got) {
				var i int
				fmt.Sscanf(ev.Author, "e%d", &i)
				require.Equal(t, at(i), ev.Timestamp)
			}
		})
	}

	// A handle from a window is not stale: it may append.
	w := e.get(&service.GetRequest{AppName: "app", UserID: "u", SessionID: "s", NumRecentEvents: 2})
	e.append(w, &service.Event{Author: "after-window"})
	require.Equal(t, n+1, e.getS("app", "u", "s").Events().Len())
}

// ---------------------------------------------------------------------------------------------------------------
// 5. Stale handles and concurrent appends

func testStaleHandle(t *testing.T, url string) {
	e := newEnv(t, url, nil)
	ctx := ctxT(t)
	created := e.create("app", "u", "s", nil)
	a := e.getS("app", "u", "s")
	b := e.getS("app", "u", "s")
	k := e.keys.Session("app", "u", "s")

	e.append(a, &service.Event{Author: "a", Actions: service.EventActions{StateDelta: map[string]any{"a": 1}}})
	// The app: key takes an order number before the session's script
	// refuses the handle (app_order.lua): like a database sequence, the
	// app's order counter is all a refused write moves.
	order := e.keys.App("app").Order
	before := e.dumpNamespace()
	delete(before, order)
	evB := &service.Event{Author: "b", Actions: service.EventActions{StateDelta: map[string]any{"b": 1, "user:b": 1, "app:b": 1, "temp:b": 1}}}
	err := e.svc.AppendEvent(ctx, b, evB)
	require.ErrorIs(t, err, service.ErrStaleSession)
	require.EqualError(t, err, "adksession: session handle is stale: session s of app app, user u", "the session is named once")
	after := e.dumpNamespace()
	require.NotContains(t, e.hash(order), "k:b", "no order recorded for the refused key")
	delete(after, order)
	require.Equal(t, before, after, "a stale append writes nothing")
	require.Empty(t, evB.ID, "the refused event is left as it was")
	require.Contains(t, evB.Actions.StateDelta, "temp:b")
	require.Equal(t, 0, b.Events().Len())
	require.NotContains(t, stateOf(b), "b")
	n, err := e.rdb.ZCard(ctx, k.Events).Result()
	require.NoError(t, err)
	require.Equal(t, int64(1), n)

	// The create handle is as stale as b.
	require.ErrorIs(t, e.svc.AppendEvent(ctx, created, &service.Event{Author: "c"}), service.ErrStaleSession)

	// a stays current through its own appends; a fresh read of b may append.
	e.append(a, &service.Event{Author: "a2"})
	b = e.getS("app", "u", "s")
	e.append(b, evB)
	got := e.getS("app", "u", "s")
	require.Equal(t, 3, got.Events().Len())
	st := stateOf(got)
	require.Equal(t, float64(1), st["a"])
	require.Equal(t, float64(1), st["b"])
	require.Equal(t, float64(1), st["user:b"])
	require.Equal(t, float64(1), st["app:b"])
	require.ErrorIs(t, e.svc.AppendEvent(ctx, a, &service.Event{Author: "a3"}), service.ErrStaleSession)
}

func testConcurrentSharedHandle(t *testing.T, url string) {
	e := newEnv(t, url, concurrentAppends)
	ctx := ctxT(t)
	s := e.create("app", "u", "s", map[string]any{"init": 1})
	const n = 100
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := range n {
		wg.Go(func() {
			errs[i] = e.svc.AppendEvent(ctx, s, &service.Event{Author: fmt.Sprintf("g%d", i), Actions: service.EventActions{
				StateDelta: map[string]any{fmt.Sprintf("k%d", i): i},
			}})
		})
	}
	wg.Wait()
	for i, err := range errs {
		require.NoError(t, err, "append %d", i)
	}
	got := e.getS("app", "u", "s")
	require.Equal(t, n, got.Events().Len())
	n64, err := e.rdb.ZCard(ctx, e.keys.Session("app", "u", "s").Events).Result()
	require.NoError(t, err)
	require.Equal(t, int64(n), n64)
	st := stateOf(got)
	for i := range n {
		require.Equal(t, float64(i), st[fmt.Sprintf("k%d", i)], "key k%d", i)
	}
	require.Equal(t, float64(1), st["init"])

	// The shared handle is up to date: same events, same state, same last update.
	require.Equal(t, ids(eventsOf(got)), ids(eventsOf(s)))
	require.Equal(t, st, stateOf(s))
	require.Equal(t, got.LastUpdateTime(), s.LastUpdateTime())
	e.append(s, &service.Event{Author: "after"})
}

func jsonOf(t *testing.T, evs []*service.Event) []string {
	t.Helper()
	out := make([]string, len(evs))
	for i, ev := range evs {
		b, err := json.Marshal(ev)
		require.NoError(t, err)
		out[i] = string(b)
	}
	return out
}

func ids(evs []*service.Event) []string {
	out := make([]string, len(evs))
	for i, ev := range evs {
		out[i] = ev.ID
	}
	return out
}

func testConcurrentStaleHandles(t *testing.T, url string) {
	e := newEnv(t, url, concurrentAppends)
	ctx := ctxT(t)
	e.create("app", "u", "s", nil)
	first := e.getS("app", "u", "s")
	e.append(first, &service.Event{Author: "first", Actions: service.EventActions{StateDelta: map[string]any{"first": true}}})

	const n = 100
	handles := make([]*service.Session, n)
	for i := range handles {
		handles[i] = e.getS("app", "u", "s")
	}
	// Make every handle stale before the race starts.
	e.append(first, &service.Event{Author: "second"})
	var wg sync.WaitGroup
	errs := make([]error, n)
	evs := make([]*service.Event, n)
	for i := range n {
		evs[i] = &service.Event{Author: fmt.Sprintf("g%d", i), Actions: service.EventActions{
			StateDelta: map[string]any{fmt.Sprintf("k%d", i): i, fmt.Sprintf("user:k%d", i): i},
		}}
		wg.Go(func() { errs[i] = e.svc.AppendEvent(ctx, handles[i], evs[i]) })
	}
	wg.Wait()
	for i, err := range errs {
		require.NoError(t, err, "append %d", i)
	}
	got := e.getS("app", "u", "s")
	all := eventsOf(got)
	require.Len(t, all, n+2)
	st := stateOf(got)
	for i := range n {
		require.Equal(t, float64(i), st[fmt.Sprintf("k%d", i)], "key k%d", i)
		require.Equal(t, float64(i), st[fmt.Sprintf("user:k%d", i)], "key user:k%d", i)
	}
	require.Equal(t, true, st["first"])

	// Each handle is brought up to date as of its own event: every event up
	// to it, and every key those events wrote.
	pos := map[string]int{}
	for i, ev := range all {
		pos[ev.ID] = i
	}
	for i, h := range handles {
		p, ok := pos[evs[i].ID]
		require.True(t, ok, "event of handle %d stored", i)
		require.Equal(t, ids(all[:p+1]), ids(eventsOf(h)), "events of handle %d", i)
		hs := stateOf(h)
		for _, ev := range all[:p+1] {
			for key, v := range ev.Actions.StateDelta {
				require.Equal(t, v, hs[key], "handle %d, key %s", i, key)
			}
		}
		require.Equal(t, evs[i].Timestamp, h.LastUpdateTime(), "handle %d", i)
	}
}

func testConcurrentUserState(t *testing.T, url string) {
	e := newEnv(t, url, concurrentAppends)
	ctx := ctxT(t)
	const n = 100
	sessions := make([]*service.Session, n)
	for i := range sessions {
		sessions[i] = e.create("app", "u", fmt.Sprintf("s%d", i), nil)
	}
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := range n {
		wg.Go(func() {
			errs[i] = e.svc.AppendEvent(ctx, sessions[i], &service.Event{Author: "a", Actions: service.EventActions{
				StateDelta: map[string]any{fmt.Sprintf("user:k%d", i): i, fmt.Sprintf("app:k%d", i): i},
			}})
		})
	}
	wg.Wait()
	for i, err := range errs {
		require.NoError(t, err, "append %d", i)
	}
	us, err := e.svc.GetUserState(ctx, &service.UserStateRequest{AppName: "app", UserID: "u"})
	require.NoError(t, err)
	require.Len(t, us, n)
	for i := range n {
		require.Equal(t, float64(i), us[fmt.Sprintf("k%d", i)])
	}
	st := stateOf(e.getS("app", "u", "s0"))
	for i := range n {
		require.Equal(t, float64(i), st[fmt.Sprintf("user:k%d", i)])
		require.Equal(t, float64(i), st[fmt.Sprintf("app:k%d", i)])
	}
}

// ---------------------------------------------------------------------------------------------------------------
// 6. Cluster-safe keys

func testClusterSafeKeys(t *testing.T, url string) {
	e := newEnv(t, url, nil)
	ctx := ctxT(t)
	odd := []string{"a:b", "{x}", "x}y", "{", "}", "a/b", "a b", "a\nb", "a\tb", "100%", "a%3Ab", "%7D", "ü:ñ", "a:", ":a"}
	for _, id := range odd {
		s := e.create(id, id, id, map[string]any{"who": id, "user:who": id, "app:who": id})
		require.Equal(t, id, s.ID())
		e.append(s, &service.Event{Author: id, Actions: service.EventActions{StateDelta: map[string]any{"ev": id}}})
		got := e.getS(id, id, id)
		require.Equal(t, map[string]any{"who": id, "user:who": id, "app:who": id, "ev": id}, stateOf(got), "id %q", id)
		require.Equal(t, id, got.Events().At(0).Author)
		require.Equal(t, id, got.AppName())
		require.Equal(t, id, got.UserID())
		lr, err := e.svc.List(ctx, &service.ListRequest{AppName: id})
		require.NoError(t, err)
		require.Len(t, lr.Sessions, 1, "app %q", id)
		require.Equal(t, id, lr.Sessions[0].UserID())
		require.Equal(t, id, lr.Sessions[0].ID())
		lr, err = e.svc.List(ctx, &service.ListRequest{AppName: id, UserID: id})
		require.NoError(t, err)
		require.Len(t, lr.Sessions, 1, "app %q", id)
		require.Equal(t, id, lr.Sessions[0].ID())
	}

	// Pairs that would collide under naive joining stay separate sessions.
	type sk struct{ app, user, sid string }
	pairs := [][2]sk{
		{{"a:b", "c", "s"}, {"a", "b:c", "s"}},
		{{"p", "q:r", "s"}, {"p", "q", "r:s"}},
		{{"p", "q", "x}y"}, {"p", "q", "x%7Dy"}},
		{{"p", "q", "x:y"}, {"p", "q", "x%3Ay"}},
		{{"p", "q%", "s"}, {"p", "q%25", "s"}},
		{{"m{1}", "u", "s"}, {"m", "{1}u", "s"}},
		{{"n", "u v", "s"}, {"n", "u", "v s"}},
		{{"o\n", "u", "s"}, {"o", "\nu", "s"}},
	}
	label := func(k sk) string { return k.app + "|" + k.user + "|" + k.sid }
	for _, p := range pairs {
		for _, k := range p {
			s := e.create(k.app, k.user, k.sid, map[string]any{"who": label(k), "user:who": label(k)})
			e.append(s, &service.Event{Author: label(k)})
		}
	}
	users := map[[2]string]int{}
	for _, p := range pairs {
		for _, k := range p {
			users[[2]string{k.app, k.user}]++
		}
	}
	for _, p := range pairs {
		for _, k := range p {
			got := e.getS(k.app, k.user, k.sid)
			require.Equal(t, label(k), stateOf(got)["who"], "session %q", label(k))
			if users[[2]string{k.app, k.user}] == 1 {
				require.Equal(t, label(k), stateOf(got)["user:who"], "session %q", label(k))
			}
			require.Equal(t, 1, got.Events().Len(), "session %q", label(k))
			require.Equal(t, label(k), got.Events().At(0).Author)
		}
	}
	// Deleting one of a pair leaves the other.
	a, b := pairs[0][0], pairs[0][1]
	require.NoError(t, e.svc.Delete(ctx, &service.DeleteRequest{AppName: a.app, UserID: a.user, SessionID: a.sid}))
	_, err := e.svc.Get(ctx, &service.GetRequest{AppName: a.app, UserID: a.user, SessionID: a.sid})
	require.ErrorIs(t, err, service.ErrNotFound)
	require.Equal(t, label(b), stateOf(e.getS(b.app, b.user, b.sid))["who"])

	if e.cluster {
		// Every key a session script touches hashes to one slot, and those keys exist.
		k := e.keys.Session("x}y", "{x}", "a:b")
		e.create("x}y", "{x}", "a:b", map[string]any{"user:x": 1})
		s := e.getS("x}y", "{x}", "a:b")
		e.append(s, &service.Event{Author: "a", InvocationID: "i", Actions: service.EventActions{StateDelta: map[string]any{"temp:x": 1}}})
		slot := func(key string) int64 {
			v, err := e.rdb.ClusterKeySlot(ctx, key).Result()
			require.NoError(t, err)
			return v
		}
		want := slot(k.Session)
		for _, key := range []string{k.Events, k.Temp, k.User, k.UserIndex, k.AppIndex, k.Log} {
			require.Equal(t, want, slot(key), "slot of %s", key)
		}
		for _, key := range []string{k.Session, k.Events, k.Temp, k.User, k.UserIndex, k.AppIndex} {
			require.True(t, e.exists(key), "key %s", key)
		}
		ak := e.keys.App("x}y")
		require.Equal(t, slot(ak.State), slot(ak.Applied))
	}
}

func testSlots(t *testing.T, url string) {
	e := newEnv(t, url, nil)
	if !e.cluster {
		t.Skip("hash slots are a cluster matter")
	}
	ctx := ctxT(t)
	const users = 200
	for i := range users {
		e.create("app", fmt.Sprintf("user-%d", i), "s", map[string]any{"user:i": i})
	}
	slots := map[int64]int{}
	for _, key := range e.scanKeys() {
		if !strings.Contains(key, ":s:") && !strings.Contains(key, ":u:") {
			continue
		}
		v, err := e.rdb.ClusterKeySlot(ctx, key).Result()
		require.NoError(t, err)
		slots[v]++
	}
	require.GreaterOrEqual(t, len(slots), 20, "200 users of one app spread over many slots")
	// And over every master.
	var mu sync.Mutex
	masters := map[string]bool{}
	cc := e.rdb.(*redis.ClusterClient)
	require.NoError(t, cc.ForEachMaster(ctx, func(ctx context.Context, c *redis.Client) error {
		n := 0
		it := c.Scan(ctx, 0, e.ns+"*:s:*", 1000).Iterator()
		for it.Next(ctx) {
			n++
		}
		if n > 0 {
			mu.Lock()
			masters[c.Options().Addr] = true
			mu.Unlock()
		}
		return it.Err()
	}))
	require.Len(t, masters, 3)
	lr, err := e.svc.List(ctx, &service.ListRequest{AppName: "app", PageSize: 1000})
	require.NoError(t, err)
	require.Len(t, lr.Sessions, users)
}

// ---------------------------------------------------------------------------------------------------------------
// 7. Bad input

func testBadInput(t *testing.T, url string) {
	e := newEnv(t, url, func(c *service.Config) { c.MaxEventBytes = 4096 })
	ctx := ctxT(t)
	s := e.create("app", "u", "s", map[string]any{"a": 1})
	e.append(s, &service.Event{Author: "a"})

	long := strings.Repeat("x", 129)
	cyclic := map[string]any{}
	cyclic["self"] = cyclic
	bad := map[string]any{
		"channel":        make(chan int),
		"func":           func() {},
		"NaN":            nanValue(),
		"cyclic map":     cyclic,
		"nested channel": map[string]any{"x": []any{1, make(chan int)}},
	}
	type call struct {
		name, field string
		do          func() error
	}
	create := func(app, user, sid string, state map[string]any) func() error {
		return func() error {
			_, err := e.svc.Create(ctx, &service.CreateRequest{AppName: app, UserID: user, SessionID: sid, State: state})
			return err
		}
	}
	get := func(req service.GetRequest) func() error {
		return func() error { _, err := e.svc.Get(ctx, &req); return err }
	}
	appendTo := func(ev *service.Event) func() error {
		return func() error { return e.svc.AppendEvent(ctx, s, ev) }
	}
	calls := []call{
		{"create empty app", "AppName", create("", "u", "x", nil)},
		{"create empty user", "UserID", create("app", "", "x", nil)},
		{"create long app", "AppName", create(long, "u", "x", nil)},
		{"create long user", "UserID", create("app", long, "x", nil)},
		{"create long session", "SessionID", create("app", "u", long, nil)},
		{"create bad utf8 app", "AppName", create("a\xffb", "u", "x", nil)},
		{"create bad utf8 user", "UserID", create("app", "\xc3", "x", nil)},
		{"create bad utf8 session", "SessionID", create("app", "u", "x\xfe", nil)},
		{"create NUL app", "AppName", create("a\x00", "u", "x", nil)},
		{"create NUL user", "UserID", create("app", "u\x00v", "x", nil)},
		{"create NUL session", "SessionID", create("app", "u", "\x00", nil)},
		{"get empty session", "SessionID", get(service.GetRequest{AppName: "app", UserID: "u"})},
		{"get empty app", "AppName", get(service.GetRequest{UserID: "u", SessionID: "s"})},
		{"get long session", "SessionID", get(service.GetRequest{AppName: "app", UserID: "u", SessionID: long})},
		{"get negative window", "NumRecentEvents", get(service.GetRequest{AppName: "app", UserID: "u", SessionID: "s", NumRecentEvents: -1})},
		{"list empty app", "AppName", func() error { _, err := e.svc.List(ctx, &service.ListRequest{}); return err }},
		{"list garbage token", "PageToken", func() error {
			_, err := e.svc.List(ctx, &service.ListRequest{AppName: "app", UserID: "u", PageToken: "not a token!"})
			return err
		}},
		{"list app garbage token", "PageToken", func() error {
			_, err := e.svc.List(ctx, &service.ListRequest{AppName: "app", PageToken: "%%%garbage"})
			return err
		}},
		{"list app forged token", "PageToken", func() error {
			_, err := e.svc.List(ctx, &service.ListRequest{AppName: "app", PageToken: token(`{"s":-5,"m":"a"}`)})
			return err
		}},
		{"list app token past the last shard", "PageToken", func() error {
			_, err := e.svc.List(ctx, &service.ListRequest{AppName: "app", PageToken: token(`{"s":100000}`)})
			return err
		}},
		{"list user token not json", "PageToken", func() error {
			_, err := e.svc.List(ctx, &service.ListRequest{AppName: "app", UserID: "u", PageToken: token(`[1,2`)})
			return err
		}},
		{"list negative page size", "PageSize", func() error {
			_, err := e.svc.List(ctx, &service.ListRequest{AppName: "app", PageSize: -1})
			return err
		}},
		{"list user page size beyond the limit", "PageSize: 9223372036854775807, limit 10000", func() error {
			_, err := e.svc.List(ctx, &service.ListRequest{AppName: "app", UserID: "u", PageSize: math.MaxInt64})
			return err
		}},
		{"list app most negative page size", "PageSize: -9223372036854775808 is negative", func() error {
			_, err := e.svc.List(ctx, &service.ListRequest{AppName: "app", PageSize: math.MinInt64})
			return err
		}},
		{"get most negative window", "NumRecentEvents: -9223372036854775808 is negative", get(service.GetRequest{AppName: "app", UserID: "u", SessionID: "s", NumRecentEvents: math.MinInt64})},
		{"dead letters beyond the limit", "limit 9223372036854775807: must be in [1,", func() error {
			_, err := e.svc.DeadLetters(ctx, math.MaxInt64)
			return err
		}},
		{"dead letters negative", "limit -1: must be in [1,", func() error { _, err := e.svc.DeadLetters(ctx, -1); return err }},
		{"append-to if last update 2^53 µs", "IfLastUpdate: 2255-06-05T23:47:34.740992Z is no session's update time", func() error {
			return e.svc.AppendTo(ctx, &service.AppendToRequest{AppName: "app", UserID: "u", SessionID: "s", Event: &service.Event{Author: "a"},
				IfLastUpdate: time.UnixMicro(1 << 53)})
		}},
		{"append-to if last update year 9999", "IfLastUpdate: 9999-01-01T00:00:00Z is no session's update time", func() error {
			return e.svc.AppendTo(ctx, &service.AppendToRequest{AppName: "app", UserID: "u", SessionID: "s", Event: &service.Event{Author: "a"},
				IfLastUpdate: time.Date(9999, 1, 1, 0, 0, 0, 0, time.UTC)})
		}},
		{"append-to if last update 1969", "IfLastUpdate: 1969-12-31T23:59:59Z is no session's update time", func() error {
			return e.svc.AppendTo(ctx, &service.AppendToRequest{AppName: "app", UserID: "u", SessionID: "s", Event: &service.Event{Author: "a"},
				IfLastUpdate: time.Unix(-1, 0)})
		}},
		{"artifact version beyond 2^53", `event.actions.artifactDelta.f: version 9223372036854775807, must be in [-1, 2^53)`,
			appendTo(&service.Event{Author: "a", Actions: service.EventActions{ArtifactDelta: map[string]int64{"f": math.MaxInt64}}})},
		{"artifact version below -1", `event.actions.artifactDelta.f: version -2`,
			appendTo(&service.Event{Author: "a", Actions: service.EventActions{ArtifactDelta: map[string]int64{"f": -2}}})},
		{"delete empty user", "UserID", func() error {
			return e.svc.Delete(ctx, &service.DeleteRequest{AppName: "app", SessionID: "s"})
		}},
		{"delete NUL session", "SessionID", func() error {
			return e.svc.Delete(ctx, &service.DeleteRequest{AppName: "app", UserID: "u", SessionID: "s\x00"})
		}},
		{"user state empty user", "UserID", func() error {
			_, err := e.svc.GetUserState(ctx, &service.UserStateRequest{AppName: "app", UserID: ""})
			return err
		}},
		{"user state bad app", "AppName", func() error {
			_, err := e.svc.GetUserState(ctx, &service.UserStateRequest{AppName: "\xff", UserID: "u"})
			return err
		}},
		{"end empty invocation", "invocationID", func() error { return e.svc.EndInvocation(ctx, s, "") }},
		{"event too large", "MaxEventBytes", appendTo(&service.Event{Author: "a", Content: json.RawMessage(
			`{"parts":[{"text":"` + strings.Repeat("y", 5000) + `"}]}`)})},
		{"event bad id", "event.ID", appendTo(&service.Event{ID: "a\x00b", Author: "a"})},
		{"event bad invocation", "event.InvocationID", appendTo(&service.Event{InvocationID: "\xff", Author: "a"})},
		{"event bad custom metadata", "event", appendTo(&service.Event{Author: "a", CustomMetadata: map[string]any{"c": make(chan int)}})},
		{"get NUL invocation", "InvocationID", get(service.GetRequest{AppName: "app", UserID: "u", SessionID: "s", InvocationID: "i\x00"})},
		{"create nil request", "create request", func() error { _, err := e.svc.Create(ctx, nil); return err }},
		{"get nil request", "get request", func() error { _, err := e.svc.Get(ctx, nil); return err }},
		{"delete nil request", "delete request", func() error { return e.svc.Delete(ctx, nil) }},
	}
	// Timestamps: [1970, 2200) UTC, whose µs a double holds exactly.
	for name, ts := range map[string]time.Time{
		"year 9999": time.Date(9999, 12, 31, 0, 0, 0, 0, time.UTC), "2200": time.Date(2200, 1, 1, 0, 0, 0, 0, time.UTC),
		"1969": time.Date(1969, 12, 31, 23, 59, 59, 0, time.UTC), "year 300000": time.Date(300000, 1, 1, 0, 0, 0, 0, time.UTC),
	} {
		calls = append(calls, call{"event timestamp " + name, "event.Timestamp: ", appendTo(&service.Event{Author: "a", Timestamp: ts})})
	}
	// NUL and invalid UTF-8 wherever a string goes, with the JSON path of the value.
	withDelta := func(d map[string]any) func() error {
		return appendTo(&service.Event{Author: "a", InvocationID: "i", Actions: service.EventActions{StateDelta: d}})
	}
	withContent := func(js string) func() error {
		return appendTo(&service.Event{Author: "a", Content: json.RawMessage(js)})
	}
	calls = append(calls, []call{
		{"NUL in user: value", `actions.stateDelta["user:x"]: contains NUL`, withDelta(map[string]any{"ok": 1, "user:x": "a\x00b"})},
		{"NUL deep in a value", `actions.stateDelta["k"][2].name: contains NUL`, withDelta(map[string]any{"k": []any{1, 2, map[string]any{"name": "\x00"}}})},
		{"NUL in app: value", `actions.stateDelta["app:a"].x: contains NUL`, withDelta(map[string]any{"app:a": map[string]any{"x": "\x00"}})},
		{"NUL in temp: value", `actions.stateDelta["temp:t"]: contains NUL`, withDelta(map[string]any{"temp:t": "\x00"})},
		{"NUL in a key", `actions.stateDelta key "user:a\x00": contains NUL`, withDelta(map[string]any{"user:a\x00": 1})},
		{"NUL in a nested key", `actions.stateDelta["k"] (object key): contains NUL`, withDelta(map[string]any{"k": map[string]any{"\x00": 1}})},
		{"bad UTF-8 key", "actions.stateDelta key", withDelta(map[string]any{"\xff": 1})},
		{"bad UTF-8 value", `actions.stateDelta["k"].v: not valid UTF-8`, withDelta(map[string]any{"k": map[string]string{"v": "\xc3"}})},
		{"raw NUL value", `actions.stateDelta["k"]: contains NUL`, withDelta(map[string]any{"k": json.RawMessage(`"\u0000"`)})},
		{"number beyond a double", `actions.stateDelta["k"]: number 1e999`, withDelta(map[string]any{"k": json.Number("1e999")})},
		{"NUL author", "event.author: contains NUL", appendTo(&service.Event{Author: "a\x00"})},
		{"bad UTF-8 author", "event.author: not valid UTF-8", appendTo(&service.Event{Author: "\xff"})},
		{"NUL branch", "event.branch: contains NUL", appendTo(&service.Event{Author: "a", Branch: "\x00"})},
		{"bad UTF-8 error message", "event.errorMessage: not valid UTF-8", appendTo(&service.Event{Author: "a", ErrorMessage: "\xfe"})},
		{"NUL transfer", "event.actions.transferToAgent: contains NUL", appendTo(&service.Event{Author: "a", Actions: service.EventActions{TransferToAgent: "\x00"}})},
		{"NUL artifact", "event.actions.artifactDelta (object key): contains NUL", appendTo(&service.Event{Author: "a", Actions: service.EventActions{ArtifactDelta: map[string]int64{"f\x00": 1}}})},
		{"bad UTF-8 content", "event.content.parts[0].text: not valid UTF-8", withContent("{\"role\":\"model\",\"parts\":[{\"text\":\"caf\xe9\"}]}")},
		{"NUL content", "event.content.parts[0].text: contains NUL", withContent(`{"parts":[{"text":"a\u0000"}]}`)},
		{"surrogate content", "event.content.parts[0].text: unpaired UTF-16 surrogate", withContent(`{"parts":[{"text":"\udc00"}]}`)},
		{"NUL function args", "event.content.parts[0].functionCall.args.q[1]: contains NUL", withContent(`{"parts":[{"functionCall":{"name":"f","args":{"q":[0,"\u0000"]}}}]}`)},
		{"content field under its storage name", "event.content.parts[0].function_call: a key the database would give back", withContent(`{"parts":[{"function_call":{"name":"f"}}]}`)},
		{"duplicate key in a content part", `event.content.parts[0].text: a key the database would give back`, withContent(`{"parts":[{"text":"a","text":"b"}]}`)},
		{"content key not camelCase", "event.content.parts[0].my_key: a key the database would give back as another", withContent(`{"parts":[{"text":"x","my_key":1}]}`)},
		{"number beyond a double in content", "event.content.n: number 2e308", withContent(`{"n":2e308}`)},
		{"bad base64 inline data", "event.content.parts[0].inlineData.data: not base64: '!' at offset 0",
			withContent(`{"parts":[{"inlineData":{"mimeType":"image/png","data":"!!!notbase64"}}]}`)},
		{"bad base64 thought signature", "event.content.parts[1].thoughtSignature: not base64: '%' at offset 0",
			withContent(`{"parts":[{"text":"x"},{"text":"y","thoughtSignature":"%%%"}]}`)},
		{"bad base64 function response part", "event.content.parts[0].functionResponse.parts[0].inlineData.data: not base64: it mixes",
			withContent(`{"parts":[{"functionResponse":{"name":"f","response":{},"parts":[{"inlineData":{"data":"ab-+"}}]}}]}`)},
		{"bad base64 compacted content", "event.actions.compaction.compactedContent.parts[0].inlineData.data: not base64: its last character",
			appendTo(&service.Event{Author: "a", Actions: service.EventActions{Compaction: json.RawMessage(`{"compactedContent":{"parts":[{"inlineData":{"data":"AB"}}]}}`)}})},
		{"bad base64 sdk blob", "event.groundingMetadata.searchEntryPoint.sdkBlob: a bytes field is a string of base64",
			appendTo(&service.Event{Author: "a", Extra: map[string]json.RawMessage{"groundingMetadata": json.RawMessage(`{"searchEntryPoint":{"sdkBlob":12}}`)}})},
		{"NUL custom metadata", "event.customMetadata.m: contains NUL", appendTo(&service.Event{Author: "a", CustomMetadata: map[string]any{"m": "\x00"}})},
		{"bad UTF-8 extra", "event.usageMetadata: not valid UTF-8", appendTo(&service.Event{Author: "a", Extra: map[string]json.RawMessage{"usageMetadata": json.RawMessage("\"\xff\"")}})},
		{"NUL actions extra", "event.actions.route[0]: contains NUL", appendTo(&service.Event{Author: "a", Actions: service.EventActions{Extra: map[string]json.RawMessage{"route": json.RawMessage(`["\u0000"]`)}}})},
		{"NUL agent state", "event.actions.agentState: contains NUL", appendTo(&service.Event{Author: "a", Actions: service.EventActions{AgentState: json.RawMessage(`"\u0000"`)}})},
		{"create NUL in user: value", `State["user:x"]: contains NUL`, create("app", "u", "new", map[string]any{"user:x": "a\x00b"})},
		{"create bad UTF-8 app: value", `State["app:x"][0]: not valid UTF-8`, create("app", "u", "new", map[string]any{"app:x": []string{"\xff"}})},
		{"create NUL key", `State key "\x00": contains NUL`, create("app", "u", "new", map[string]any{"\x00": 1})},
	}...)
	// Limits: keys per delta, bytes per call (MaxWriteBytes = 2 × MaxEventBytes = 8192 here).
	keys := func(n int, prefix string) map[string]any {
		m := map[string]any{}
		for i := range n {
			m[fmt.Sprintf("%sk%d", prefix, i)] = i
		}
		return m
	}
	temp3k := func(n int) map[string]any {
		m := map[string]any{}
		for i := range n {
			m[fmt.Sprintf("temp:%d", i)] = strings.Repeat("t", 3000)
		}
		return m
	}
	calls = append(calls, []call{
		{"1001 keys", "actions.stateDelta: 1001 keys, limit 1000 (Config.MaxDeltaKeys)", withDelta(keys(1001, ""))},
		{"1001 temp: keys", "actions.stateDelta: 1001 keys, limit 1000 (Config.MaxDeltaKeys)", withDelta(keys(1001, "temp:"))},
		{"create 1001 keys", "State: 1001 keys, limit 1000 (Config.MaxDeltaKeys)", create("app", "u", "new", keys(1001, "user:"))},
		{"temp: values beyond the call's bytes", "limit 8192 (Config.MaxWriteBytes)", withDelta(temp3k(3))},
		{"create state beyond the call's bytes", "State: 9018+ bytes of keys and values, limit 8192 (Config.MaxWriteBytes)", create("app", "u", "new", map[string]any{
			"a": strings.Repeat("a", 3000), "user:b": strings.Repeat("b", 3000), "app:c": strings.Repeat("c", 3000)})},
		{"state value beyond its limit", `actions.stateDelta["temp:t"]: value is 4098 bytes, limit 4096 (Config.MaxStateValueBytes)`, withDelta(map[string]any{"temp:t": strings.Repeat("x", 4096)})},
	}...)
	for name, v := range bad {
		calls = append(calls,
			call{"create state " + name, "State", create("app", "u", "new", map[string]any{"ok": 1, "bad": v})},
			call{"create user state " + name, "State", create("app", "u", "new", map[string]any{"user:bad": v})},
			call{"create app state " + name, "State", create("app", "u", "new", map[string]any{"app:bad": v})},
			call{"delta " + name, "stateDelta", appendTo(&service.Event{Author: "a", Actions: service.EventActions{
				StateDelta: map[string]any{"ok": 1, "user:ok": 1, "bad": v}}})},
			call{"app delta " + name, "stateDelta", appendTo(&service.Event{Author: "a", Actions: service.EventActions{
				StateDelta: map[string]any{"ok": 1, "app:bad": v}}})},
			call{"temp delta " + name, "stateDelta", appendTo(&service.Event{Author: "a", InvocationID: "i", Actions: service.EventActions{
				StateDelta: map[string]any{"ok": 1, "temp:bad": v}}})},
		)
	}
	before := e.dumpNamespace()
	stateBefore, eventsBefore := stateOf(s), ids(eventsOf(s))
	for _, c := range calls {
		err := c.do()
		require.ErrorIs(t, err, service.ErrInvalidArgument, c.name)
		require.Contains(t, err.Error(), c.field, c.name)
		require.Equal(t, before, e.dumpNamespace(), "%s: bad input writes nothing", c.name)
	}
	require.Equal(t, stateBefore, stateOf(s), "bad input leaves the handle as it was")
	require.Equal(t, eventsBefore, ids(eventsOf(s)))
	_, err := e.svc.Get(ctx, &service.GetRequest{AppName: "app", UserID: "u", SessionID: "new"})
	require.ErrorIs(t, err, service.ErrNotFound)
	// The handle still works.
	e.append(s, &service.Event{Author: "b"})
	require.Equal(t, 2, e.getS("app", "u", "s").Events().Len())
}

func token(js string) string { return base64.RawURLEncoding.EncodeToString([]byte(js)) }

func nanValue() float64 {
	zero := 0.0
	return zero / zero
}

// ---------------------------------------------------------------------------------------------------------------
// 8. List and Delete

func testListUser(t *testing.T, url string) {
	e := newEnv(t, url, nil)
	ctx := ctxT(t)
	e.create("app", "other-user", "x", nil)
	const n = 25
	handles := map[string]*service.Session{}
	for i := range n {
		id := fmt.Sprintf("s%02d", i)
		handles[id] = e.create("app", "u", id, map[string]any{"i": i, "user:shared": "u", "app:shared": "a"})
	}
	// Touch sessions in a scrambled order, so update order differs from creation order.
	for i := range n {
		id := fmt.Sprintf("s%02d", (i*7)%n)
		if i%3 == 0 {
			continue
		}
		e.append(handles[id], &service.Event{Author: "a"})
	}
	var want []string
	byTime := map[string]time.Time{}
	for id := range handles {
		byTime[id] = e.getS("app", "u", id).LastUpdateTime()
		want = append(want, id)
	}
	sortByTimeDesc(want, byTime)

	var got []string
	tok := ""
	pages := 0
	for {
		r, err := e.svc.List(ctx, &service.ListRequest{AppName: "app", UserID: "u", PageSize: 10, PageToken: tok})
		require.NoError(t, err)
		pages++
		require.LessOrEqual(t, pages, 3)
		if r.NextPageToken != "" {
			require.Len(t, r.Sessions, 10)
		}
		for _, s := range r.Sessions {
			require.Equal(t, "app", s.AppName())
			require.Equal(t, "u", s.UserID())
			require.Equal(t, 0, s.Events().Len(), "listed sessions carry no events")
			st := stateOf(s)
			require.Equal(t, "u", st["user:shared"])
			require.Equal(t, "a", st["app:shared"])
			var i int
			fmt.Sscanf(s.ID(), "s%d", &i)
			require.Equal(t, float64(i), st["i"])
			require.Equal(t, byTime[s.ID()], s.LastUpdateTime())
			got = append(got, s.ID())
		}
		if tok = r.NextPageToken; tok == "" {
			break
		}
	}
	require.Equal(t, 3, pages)
	require.Equal(t, want, got, "every session once, newest update first")

	// Default page size covers them all.
	r, err := e.svc.List(ctx, &service.ListRequest{AppName: "app", UserID: "u"})
	require.NoError(t, err)
	require.Len(t, r.Sessions, n)
	require.Empty(t, r.NextPageToken)
	// Sessions created in the same microsecond still page exactly once.
	for _, size := range []int{1, 3, 7} {
		var all []string
		tok := ""
		for {
			r, err := e.svc.List(ctx, &service.ListRequest{AppName: "app", UserID: "u", PageSize: size, PageToken: tok})
			require.NoError(t, err)
			for _, s := range r.Sessions {
				all = append(all, s.ID())
			}
			if tok = r.NextPageToken; tok == "" {
				break
			}
		}
		require.Equal(t, want, all, "page size %d", size)
	}
	// A user with no sessions.
	r, err = e.svc.List(ctx, &service.ListRequest{AppName: "app", UserID: "nobody"})
	require.NoError(t, err)
	require.Empty(t, r.Sessions)
	require.Empty(t, r.NextPageToken)
}

func sortByTimeDesc(ids []string, at map[string]time.Time) {
	for i := 1; i < len(ids); i++ {
		for j := i; j > 0; j-- {
			a, b := ids[j-1], ids[j]
			if at[a].Before(at[b]) || at[a].Equal(at[b]) && a < b {
				ids[j-1], ids[j] = b, a
			}
		}
	}
}

func testListApp(t *testing.T, url string) {
	e := newEnv(t, url, nil)
	ctx := ctxT(t)
	want := map[string]string{} // "user/sid" -> user
	for u, count := range map[string]int{"u1": 25, "u2": 7, "u:3": 3, "u4": 1} {
		for i := range count {
			sid := fmt.Sprintf("s%d", i)
			e.create("app", u, sid, map[string]any{"owner": u, "user:name": u})
			want[u+"/"+sid] = u
		}
	}
	for i := range 5 {
		e.create("app2", "u1", fmt.Sprintf("other%d", i), nil)
	}
	e.create("ap", "p:u1", "s0", nil) // "ap"+"p:u1" vs "app"+"u1" under naive joining
	got := map[string]int{}
	tok := ""
	for pages := 0; ; pages++ {
		require.Less(t, pages, 10)
		r, err := e.svc.List(ctx, &service.ListRequest{AppName: "app", PageSize: 10, PageToken: tok})
		require.NoError(t, err)
		for _, s := range r.Sessions {
			key := s.UserID() + "/" + s.ID()
			got[key]++
			require.Equal(t, "app", s.AppName())
			require.Equal(t, 0, s.Events().Len())
			st := stateOf(s)
			require.Equal(t, s.UserID(), st["owner"], key)
			require.Equal(t, s.UserID(), st["user:name"], key)
		}
		if tok = r.NextPageToken; tok == "" {
			break
		}
	}
	require.Len(t, got, len(want))
	for k, c := range got {
		require.Contains(t, want, k)
		require.Equal(t, 1, c, "session %s listed %d times", k, c)
	}
	// Appends do not change the app-wide listing.
	s := e.getS("app", "u1", "s3")
	e.append(s, &service.Event{Author: "a"})
	r, err := e.svc.List(ctx, &service.ListRequest{AppName: "app", PageSize: 1000})
	require.NoError(t, err)
	require.Len(t, r.Sessions, len(want))
	require.Empty(t, r.NextPageToken)
}

func testDelete(t *testing.T, url string) {
	e := newEnv(t, url, nil)
	ctx := ctxT(t)
	s := e.create("app", "u", "s", map[string]any{"a": 1, "user:u": 1, "app:p": 1})
	e.append(s, &service.Event{Author: "a", InvocationID: "i", Actions: service.EventActions{StateDelta: map[string]any{"temp:t": 1, "b": 2}}})
	e.create("app", "u", "keep", nil)
	k := e.keys.Session("app", "u", "s")
	require.True(t, e.exists(k.Temp))

	// The wrong user or app removes nothing.
	before := e.dumpNamespace()
	require.NoError(t, e.svc.Delete(ctx, &service.DeleteRequest{AppName: "app", UserID: "other", SessionID: "s"}))
	require.NoError(t, e.svc.Delete(ctx, &service.DeleteRequest{AppName: "app2", UserID: "u", SessionID: "s"}))
	require.NoError(t, e.svc.Delete(ctx, &service.DeleteRequest{AppName: "app", UserID: "u", SessionID: "missing"}))
	require.Equal(t, before, e.dumpNamespace(), "deleting a missing session or with the wrong user writes nothing")
	require.Equal(t, 1, e.getS("app", "u", "s").Events().Len())

	require.NoError(t, e.svc.Delete(ctx, &service.DeleteRequest{AppName: "app", UserID: "u", SessionID: "s"}))
	_, err := e.svc.Get(ctx, &service.GetRequest{AppName: "app", UserID: "u", SessionID: "s"})
	require.ErrorIs(t, err, service.ErrNotFound)
	for _, key := range []string{k.Session, k.Events, k.Temp} {
		require.False(t, e.exists(key), "key %s after delete", key)
	}
	_, err = e.rdb.ZScore(ctx, k.UserIndex, "s").Result()
	require.ErrorIs(t, err, redis.Nil, "user index entry removed")
	_, err = e.rdb.ZScore(ctx, k.AppIndex, cache.AppIndexMember("u", "s")).Result()
	require.ErrorIs(t, err, redis.Nil, "app index entry removed")

	// App and user state stay.
	us, err := e.svc.GetUserState(ctx, &service.UserStateRequest{AppName: "app", UserID: "u"})
	require.NoError(t, err)
	require.Equal(t, map[string]any{"u": float64(1)}, us)
	require.Equal(t, map[string]any{"user:u": float64(1), "app:p": float64(1)}, stateOf(e.getS("app", "u", "keep")))
	r, err := e.svc.List(ctx, &service.ListRequest{AppName: "app", UserID: "u"})
	require.NoError(t, err)
	require.Len(t, r.Sessions, 1)
	require.Equal(t, "keep", r.Sessions[0].ID())
	r, err = e.svc.List(ctx, &service.ListRequest{AppName: "app"})
	require.NoError(t, err)
	require.Len(t, r.Sessions, 1)

	// Deleting again is not an error; the id may be created anew, empty.
	require.NoError(t, e.svc.Delete(ctx, &service.DeleteRequest{AppName: "app", UserID: "u", SessionID: "s"}))
	s2 := e.create("app", "u", "s", nil)
	require.Equal(t, 0, s2.Events().Len())
	require.Equal(t, map[string]any{"user:u": float64(1), "app:p": float64(1)}, stateOf(e.getS("app", "u", "s")))
	require.Equal(t, 0, e.getS("app", "u", "s").Events().Len())
}

// ---------------------------------------------------------------------------------------------------------------
// 9. Event fidelity

// apiEvent is an event as ADK's api_server writes it, with every kind of field.
const apiEvent = `{
  "id": "ev-1",
  "invocationId": "e-123",
  "author": "root_agent",
  "branch": "root_agent.sub",
  "timestamp": 1735787045.123456,
  "turnComplete": true,
  "content": {"role": "model", "parts": [
    {"text": "hello ✓ \u0001 \"quoted\" <b>&amp;</b>"},
    {"functionCall": {"id": "fc-1", "name": "get_weather", "args": {"city": "Paris", "days": 3, "opts": {"unit_name": "C", "nested": [1, 2.5, null, true]}}}},
    {"functionResponse": {"id": "fc-1", "name": "get_weather", "response": {"result": {"temp_c": 21.5}, "snake_key": "v"}}},
    {"inlineData": {"mimeType": "image/png", "data": "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg=="}},
    {"thought": true, "thoughtSignature": "c2ln", "text": "thinking"}
  ]},
  "actions": {
    "stateDelta": {"k": "v", "user:u": {"a": [1, 2]}, "app:x": null, "camelKey": 1, "snake_key": 2},
    "artifactDelta": {"report.pdf": 3, "image.png": 0},
    "requestedAuthConfigs": {"fc-9": {"authScheme": {"type": "oauth2"}}},
    "requestedToolConfirmations": {"fc-8": {"hint": "ok?", "confirmed": false}},
    "transferToAgent": "billing_agent",
    "escalate": true,
    "skipSummarization": true,
    "unknownAction": {"futureField": [1, "two"]}
  },
  "longRunningToolIds": ["fc-1", "fc-2"],
  "customMetadata": {"trace_id": "abc", "nested": {"deep": [1, 2, 3]}, "n": 1.25},
  "usageMetadata": {"promptTokenCount": 10, "candidatesTokenCount": 20},
  "groundingMetadata": {"webSearchQueries": ["q"]},
  "finishReason": "STOP",
  "modelVersion": "gemini-2.5-flash",
  "unknownTopLevel": {"x": [true, false]}
}`

func testEventFidelity(t *testing.T, url string) {
	e := newEnv(t, url, nil)
	s := e.create("app", "u", "s", nil)

	var sent service.Event
	require.NoError(t, json.Unmarshal([]byte(apiEvent), &sent))
	wantJSON, err := json.Marshal(sent)
	require.NoError(t, err)
	require.JSONEq(t, apiEvent, string(wantJSON), "the API form round-trips through Event before any storage")

	e.append(s, &sent)
	got := e.getS("app", "u", "s")
	require.Equal(t, 1, got.Events().Len())
	gotJSON, err := json.Marshal(got.Events().At(0))
	require.NoError(t, err)
	require.JSONEq(t, string(wantJSON), string(gotJSON))
	require.JSONEq(t, apiEvent, string(gotJSON))
	handleJSON, err := json.Marshal(s.Events().At(0))
	require.NoError(t, err)
	require.JSONEq(t, apiEvent, string(handleJSON))

	// An event with no id and no timestamp: equal after normalizing those two.
	var noID service.Event
	require.NoError(t, json.Unmarshal([]byte(apiEvent), &noID))
	noID.ID, noID.Timestamp = "", time.Time{}
	e.append(s, &noID)
	got = e.getS("app", "u", "s")
	require.Equal(t, 2, got.Events().Len())
	g := got.Events().At(1)
	require.NotEmpty(t, g.ID)
	require.Equal(t, noID.ID, g.ID)
	require.Equal(t, noID.Timestamp, g.Timestamp)
	norm := func(ev *service.Event) string {
		c := ev.Clone()
		c.ID, c.Timestamp = "", time.Time{}
		b, err := json.Marshal(c)
		require.NoError(t, err)
		return string(b)
	}
	require.JSONEq(t, norm(&sent), norm(g))

	// In Redis the event is stored in API form.
	stored := e.storedEvents("app", "u", "s")
	require.JSONEq(t, apiEvent, stored[0])

	// ADK's storage form (snake_case keys; seconds as ADK Python writes, ms as ADK JS) reads as the same event.
	// A field of no known model keeps its value as written (only its own key follows the convention).
	for name, ts := range map[string]string{"seconds": "1735787045.123456", "milliseconds": "1735787045123.456"} {
		storage := `{
  "id": "ev-1", "invocation_id": "e-123", "author": "root_agent", "branch": "root_agent.sub",
  "timestamp": ` + ts + `, "turn_complete": true,
  "content": {"role": "model", "parts": [
    {"text": "hello ✓ \u0001 \"quoted\" <b>&amp;</b>"},
    {"function_call": {"id": "fc-1", "name": "get_weather", "args": {"city": "Paris", "days": 3, "opts": {"unit_name": "C", "nested": [1, 2.5, null, true]}}}},
    {"function_response": {"id": "fc-1", "name": "get_weather", "response": {"result": {"temp_c": 21.5}, "snake_key": "v"}}},
    {"inline_data": {"mime_type": "image/png", "data": "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg=="}},
    {"thought": true, "thought_signature": "c2ln", "text": "thinking"}
  ]},
  "actions": {
    "state_delta": {"k": "v", "user:u": {"a": [1, 2]}, "app:x": null, "camelKey": 1, "snake_key": 2},
    "artifact_delta": {"report.pdf": 3, "image.png": 0},
    "requested_auth_configs": {"fc-9": {"auth_scheme": {"type": "oauth2"}}},
    "requested_tool_confirmations": {"fc-8": {"hint": "ok?", "confirmed": false}},
    "transfer_to_agent": "billing_agent", "escalate": true, "skip_summarization": true,
    "unknown_action": {"futureField": [1, "two"]}
  },
  "long_running_tool_ids": ["fc-1", "fc-2"],
  "custom_metadata": {"trace_id": "abc", "nested": {"deep": [1, 2, 3]}, "n": 1.25},
  "usage_metadata": {"prompt_token_count": 10, "candidates_token_count": 20},
  "grounding_metadata": {"web_search_queries": ["q"]},
  "finish_reason": "STOP", "model_version": "gemini-2.5-flash",
  "unknown_top_level": {"x": [true, false]}
}`
		var fromStorage service.Event
		require.NoError(t, json.Unmarshal([]byte(storage), &fromStorage), name)
		b, err := json.Marshal(fromStorage)
		require.NoError(t, err)
		require.JSONEq(t, apiEvent, string(b), name)
		require.Equal(t, sent.Timestamp, fromStorage.Timestamp, name)
	}
}
