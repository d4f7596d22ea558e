package integration

// Bounded memory (docs/design.md, "Indexes and lists"): with a
// database, every key of an idle, flushed session and of its user expires
// or is pruned; the user index survives losing either of its two keys; the
// app index holds only unflushed creates while app listings stay complete;
// List reads what Redis lost from the database in one query per page (an
// app listing: after its page query)
// without loading (or caching) any event. The test* functions run in
// runWriteBehind, on standalone Redis and on the cluster.

import (
	"context"
	"fmt"
	"regexp"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/adksession/adksession/cache"
	"github.com/adksession/adksession/integration/testenv"
	"github.com/adksession/adksession/service"
)

// namespaceKeys returns every key of the test's namespace (every master of
// a cluster).
func (e *wbEnv) namespaceKeys() []string {
	e.t.Helper()
	ctx := wbCtx(e.t)
	var mu sync.Mutex
	var keys []string
	scan := func(ctx context.Context, c *redis.Client) error {
		iter := c.Scan(ctx, 0, e.cfg.Namespace+"*", 1000).Iterator()
		for iter.Next(ctx) {
			mu.Lock()
			keys = append(keys, iter.Val())
			mu.Unlock()
		}
		return iter.Err()
	}
	switch c := e.rdb.(type) {
	case *redis.ClusterClient:
		require.NoError(e.t, c.ForEachMaster(ctx, scan))
	case *redis.Client:
		require.NoError(e.t, scan(ctx, c))
	}
	sort.Strings(keys)
	return keys
}

// keyKind names the kind of a key of the namespace: "s", "e", "us", "as",
// "log", "a", "meta", ...
func (e *wbEnv) keyKind(key string) string {
	rest := strings.TrimPrefix(key, e.cfg.Namespace+"adk:")
	if m := regexp.MustCompile(`^\{[^}]*\}:([a-z]+)`).FindStringSubmatch(rest); m != nil {
		return m[1]
	}
	return rest
}

// testKeysExpire: after Flush, every key of idle sessions and their users
// (s, e, r, t, u, us) has a TTL or is gone, and no app index is left: only
// the fixed per-deployment, per-shard and per-app keys stay.
func testKeysExpire(t *testing.T, url string) {
	const ttl = 10 * time.Minute
	e := newWB(t, url, testenv.FreshDatabase(t), func(c *service.Config) { c.CacheTTL = ttl })
	ctx := wbCtx(t)
	for u := range 3 {
		user := fmt.Sprint("user-", u)
		for i := range 3 {
			s := e.create(e.svc, "app", user, fmt.Sprint("s", i), map[string]any{"k": i, "user:u": u, "app:a": u})
			for j := range 4 {
				e.mustAppend(e.svc, s, fmt.Sprint("inv-", j/2), fmt.Sprint("m", j), map[string]any{"j": j, "user:j": j, "temp:t": j})
			}
		}
	}
	e.flush(e.svc)
	e.delete(e.svc, "app", "user-0", "s0") // flushed, then deleted
	e.create(e.svc, "app", "user-1", "short", nil)
	e.delete(e.svc, "app", "user-1", "short") // deleted before its create was flushed
	rw := e.create(e.svc, "app", "user-2", "rewound", nil)
	e.mustAppend(e.svc, rw, "r1", "to undo", map[string]any{"x": 1})
	_, err := e.svc.Rewind(ctx, &service.RewindRequest{AppName: "app", UserID: "user-2", SessionID: "rewound", BeforeInvocationID: "r1"})
	require.NoError(t, err)
	e.flush(e.svc)

	fixed := map[string]bool{"meta": true, "stats": true, "log": true, "dead": true, "g": true, "a": true, "ap": true, "ao": true}
	seen := map[string]int{}
	for _, key := range e.namespaceKeys() {
		kind := e.keyKind(key)
		seen[kind]++
		require.NotEqual(t, "as", kind, "app index %s outlives the flush of its sessions", key)
		if fixed[kind] {
			continue
		}
		d := e.pttl(key)
		require.True(t, d > 0, "key %s (%s) of a flushed, idle session or user: PTTL %v", key, kind, d)
		if kind != "t" && kind != "lease" {
			require.True(t, d > ttl-time.Minute && d <= ttl, "key %s: PTTL %v, want about CacheTTL %v", key, d, ttl)
		}
	}
	for _, kind := range []string{"s", "e", "r", "u", "us"} {
		require.Positive(t, seen[kind], "no %s key checked: %v", kind, seen)
	}
}

// listIDs pages through a listing and returns "user/sid" of each session
// in listing order; check is called on each session.
func listIDs(t *testing.T, svc *service.Service, app, user string, size int, between func(), check func(*service.Session)) []string {
	t.Helper()
	var ids []string
	tok := ""
	for pages := 0; ; pages++ {
		require.Less(t, pages, 1000)
		r, err := svc.List(wbCtx(t), &service.ListRequest{AppName: app, UserID: user, PageSize: size, PageToken: tok})
		require.NoError(t, err)
		for _, s := range r.Sessions {
			require.Zero(t, s.Events().Len(), "listed sessions carry no events")
			if check != nil {
				check(s)
			}
			ids = append(ids, s.UserID()+"/"+s.ID())
		}
		if tok = r.NextPageToken; tok == "" {
			return ids
		}
		if between != nil {
			between()
		}
	}
}

// checkListed asserts that a listed session has the model's merged state
// and last update time.
func (e *wbEnv) checkListed(s *service.Session) {
	e.t.Helper()
	k := sessKey{s.AppName(), s.UserID(), s.ID()}
	require.Equal(e.t, e.model.mergedState(k), stateMap(s), "listed state of %v", k)
	e.model.mu.Lock()
	want := e.model.sessions[k].updateTime()
	e.model.mu.Unlock()
	require.Equal(e.t, want.UnixMicro(), s.LastUpdateTime().UnixMicro(), "listed update time of %v", k)
}

// testUserIndexPartialEviction: eviction may take the user index or the
// user hash alone (volatile-lru); either way creates still refuse ids the
// database has and lists are complete, and the rebuilt index expires.
func testUserIndexPartialEviction(t *testing.T, url string) {
	e := newWB(t, url, testenv.FreshDatabase(t), func(c *service.Config) { c.DisableFlusher = true })
	ctx := wbCtx(t)
	flusher := e.svc.NewFlusher(nil)
	for i := 1; i <= 3; i++ {
		e.create(e.svc, "app", "u", fmt.Sprint("s", i), map[string]any{"i": i, "user:name": "ann", "app:v": 1})
	}
	drain(t, flusher)
	k := e.keys.Session("app", "u", "")
	create := func(sid string) error {
		_, err := e.svc.Create(ctx, &service.CreateRequest{AppName: "app", UserID: "u", SessionID: sid})
		return err
	}
	list := func(want ...string) {
		t.Helper()
		got := listIDs(t, e.svc, "app", "u", 2, nil, e.checkListed)
		sort.Strings(got)
		require.Equal(t, want, got)
	}

	// evict drops keys the way eviction may: one at a time.
	evict := func(keys ...string) {
		t.Helper()
		for _, key := range keys {
			require.NoError(t, e.rdb.Del(ctx, key).Err())
		}
	}
	evictSession := func(sid string) {
		sk := e.keys.Session("app", "u", sid)
		evict(sk.Session, sk.Events, sk.Undo)
	}

	// The index is lost, the user hash stays.
	evictSession("s1")
	evict(k.UserIndex)
	require.ErrorIs(t, create("s1"), service.ErrAlreadyExists, "an id only the database has, with the user index lost")
	list("u/s1", "u/s2", "u/s3")
	require.Positive(t, e.pttl(k.UserIndex), "the rebuilt index expires")

	// The user hash is lost, the index stays.
	evict(k.User)
	list("u/s1", "u/s2", "u/s3")
	us, err := e.svc.GetUserState(ctx, &service.UserStateRequest{AppName: "app", UserID: "u"})
	require.NoError(t, err)
	require.Equal(t, map[string]any{"name": "ann"}, us)
	e.create(e.svc, "app", "u", "s4", map[string]any{"user:name": "bob"})

	// The index is lost while a create is not flushed: the rebuild finds it
	// in the app index.
	evictSession("s2")
	evict(k.UserIndex)
	require.ErrorIs(t, create("s2"), service.ErrAlreadyExists)
	require.ErrorIs(t, create("s4"), service.ErrAlreadyExists)
	list("u/s1", "u/s2", "u/s3", "u/s4")
	evictSession("s3")
	evict(k.UserIndex)
	e.create(e.svc, "app", "u", "s5", nil) // into an index without its completeness marker
	require.ErrorIs(t, create("s3"), service.ErrAlreadyExists)
	list("u/s1", "u/s2", "u/s3", "u/s4", "u/s5")
	drain(t, flusher)
	checkDB(t, e.db, e.model)
	require.Positive(t, e.pttl(k.UserIndex), "the flushed user's index expires")
	require.Positive(t, e.pttl(k.User))
}

// testListWithoutEvents: 30 sessions of 50 events each, flushed, then
// evicted: List returns all 30 with their state and update time from one
// database query, and Redis holds no event (nor session) of them afterwards.
func testListWithoutEvents(t *testing.T, url string) {
	base := testenv.FreshDatabase(t)
	e := newWB(t, url, base, nil)
	counter, viaCounter := startPGCounter(t, base)
	cfg := e.cfg
	cfg.DatabaseURL, cfg.DisableFlusher = viaCounter, true
	lister := e.open(cfg)
	ctx := wbCtx(t)
	const n, events = 30, 50
	for i := range n {
		s := e.create(e.svc, "app", "u", fmt.Sprintf("s%02d", i), map[string]any{"i": i, "user:since": 1, "app:v": 1})
		for j := range events {
			e.mustAppend(e.svc, s, fmt.Sprint("inv-", j/10), fmt.Sprint("m", j), map[string]any{"j": j, "user:last": i, "app:last": i})
		}
	}
	e.flush(e.svc)
	var evicted []string
	for i := range n {
		k := e.keys.Session("app", "u", fmt.Sprintf("s%02d", i))
		evicted = append(evicted, k.Session, k.Events, k.Undo, k.Temp)
	}
	for _, key := range evicted {
		require.NoError(t, e.rdb.Del(ctx, key).Err())
	}
	var all []string
	for i := range n {
		all = append(all, fmt.Sprintf("u/s%02d", i))
	}

	counter.Reset()
	got := listIDs(t, lister, "app", "u", 100, nil, e.checkListed)
	require.Len(t, got, n)
	require.EqualValues(t, 1, counter.Statements(), "database statements of a page of a user's list")
	sort.Strings(got)
	require.Equal(t, all, got)

	counter.Reset()
	require.Equal(t, all, listIDs(t, lister, "app", "", 100, nil, e.checkListed))
	// The page, and its sessions Redis does not hold read again after Redis
	// (one deleted in between must not be listed: TestAppListWhileDeleteFlushed).
	require.EqualValues(t, 2, counter.Statements(), "database statements of a page of an app's list")

	for _, key := range e.namespaceKeys() {
		kind := e.keyKind(key)
		require.False(t, kind == "s" || kind == "e" || kind == "r", "List put %s back into Redis", key)
	}
}

// TestListWithoutEventsFlushAll: after Redis lost everything, the cost of a
// page does not depend on how many sessions it lists (no per-session load).
func TestListWithoutEventsFlushAll(t *testing.T) {
	t.Parallel()
	r := testenv.StartRedis(t)
	base := testenv.FreshDatabase(t)
	e := newWB(t, r.URL, base, nil)
	counter, viaCounter := startPGCounter(t, base)
	cfg := e.cfg
	cfg.DatabaseURL, cfg.DisableFlusher = viaCounter, true
	lister := e.open(cfg)
	ctx := wbCtx(t)
	for i := range 30 {
		s := e.create(e.svc, "app", fmt.Sprint("u", i%2), fmt.Sprintf("s%02d", i), map[string]any{"i": i, "user:u": i % 2, "app:v": 1})
		for j := range 20 {
			e.mustAppend(e.svc, s, "inv", fmt.Sprint("m", j), map[string]any{"j": j})
		}
	}
	e.flush(e.svc)

	require.NoError(t, e.rdb.FlushAll(ctx).Err())
	counter.Reset()
	require.Len(t, listIDs(t, lister, "app", "u0", 100, nil, e.checkListed), 15)
	// The user's state, the user's sessions (its index), the page's
	// sessions, the app's state.
	require.EqualValues(t, 4, counter.Statements(), "database statements of a page of a user's list")

	require.NoError(t, e.rdb.FlushAll(ctx).Err())
	counter.Reset()
	require.Len(t, listIDs(t, lister, "app", "", 100, nil, e.checkListed), 30)
	// The page (with its users' state), the page's sessions Redis does not
	// hold read again after Redis (one deleted in between must not be
	// listed: TestAppListWhileDeleteFlushed), the app's state.
	require.EqualValues(t, 3, counter.Statements(), "database statements of a page of an app's list")
	for _, key := range e.namespaceKeys() {
		kind := e.keyKind(key)
		require.False(t, kind == "s" || kind == "e" || kind == "r", "List put %s back into Redis", key)
	}
}

// testAppListing: with a database the app index holds only sessions whose
// create is not flushed; an app listing is still every live session once,
// in (user, sid) byte order, while sessions are flushed, created and
// deleted between its pages; deleted sessions whose delete is not flushed
// do not show, created ones that are not flushed do.
func testAppListing(t *testing.T, url string) {
	e := newWB(t, url, testenv.FreshDatabase(t), func(c *service.Config) { c.DisableFlusher = true })
	ctx := wbCtx(t)
	flusher := e.svc.NewFlusher(nil)
	users := []string{"a", "B", "b", "a b", "a:", "é", "Z"}
	live := map[string]bool{}
	create := func(user, sid string) {
		e.create(e.svc, "app", user, sid, map[string]any{"who": user + "/" + sid, "user:u": user, "app:v": 1})
		live[user+"/"+sid] = true
	}
	for i, u := range users {
		for j := range 3 {
			create(u, fmt.Sprint("s", (i+j)%4))
		}
	}
	e.create(e.svc, "other", "a", "s0", nil)
	drain(t, flusher)
	require.Empty(t, e.appIndexMembers(), "flushed sessions leave the app index")

	for i, u := range users {
		create(u, fmt.Sprint("new", i)) // not flushed
	}
	e.delete(e.svc, "app", "b", "s1") // flushed, delete not flushed
	delete(live, "b/s1")
	e.delete(e.svc, "app", "é", "new5") // never flushed
	delete(live, "é/new5")
	require.Len(t, e.appIndexMembers(), len(users)-1)

	want := make([]string, 0, len(live))
	for k := range live {
		want = append(want, k)
	}
	sort.Slice(want, func(i, j int) bool { return byteOrder(want[i], want[j]) })
	check := func(s *service.Session) {
		require.Equal(t, s.UserID()+"/"+s.ID(), stateMap(s)["who"])
		require.Equal(t, s.UserID(), stateMap(s)["user:u"])
	}
	require.Equal(t, want, listIDs(t, e.svc, "app", "", 4, nil, check))
	// A flusher that died between its commit and flushed.lua leaves a
	// flushed session in the app index: it is listed once all the same.
	k := e.keys.Session("app", "B", "s1")
	require.NoError(t, e.rdb.ZAdd(ctx, k.AppIndex, redis.Z{Member: cache.AppIndexMember("B", "s1")}).Err())
	require.Equal(t, want, listIDs(t, e.svc, "app", "", 4, nil, check))

	// Between pages: flush (sessions move from the app index to the
	// database), create and delete.
	step := 0
	between := func() {
		step++
		switch step % 3 {
		case 0:
			drain(t, flusher)
		case 1:
			e.create(e.svc, "app", "zz", fmt.Sprint("during", step), map[string]any{"who": fmt.Sprint("zz/during", step), "user:u": "zz"})
		case 2:
			drain(t, flusher)
			e.create(e.svc, "app", "0", fmt.Sprint("during", step), nil) // before every listed user: never seen
		}
	}
	got := listIDs(t, e.svc, "app", "", 3, between, func(s *service.Session) {
		if s.UserID() != "0" {
			check(s)
		}
	})
	var listed []string
	for _, id := range got {
		if !strings.HasPrefix(id, "zz/") {
			listed = append(listed, id)
		}
	}
	require.Equal(t, want, listed, "every session that lived through the walk, once, in order")
	require.True(t, slices.IsSortedFunc(got, func(a, b string) int {
		if byteOrder(a, b) {
			return -1
		}
		return 1
	}))
	drain(t, flusher)
	require.Equal(t, []string{"B/s1"}, e.appIndexMembers(), "only the member left behind by hand")
	checkDB(t, e.db, e.model)
}

// byteOrder orders "user/sid" ids as (user, sid) byte order.
func byteOrder(a, b string) bool {
	au, as, _ := strings.Cut(a, "/")
	bu, bs, _ := strings.Cut(b, "/")
	if au != bu {
		return au < bu
	}
	return as < bs
}

// appIndexMembers returns the members of every app index of "app".
func (e *wbEnv) appIndexMembers() []string {
	e.t.Helper()
	var out []string
	for shard := range e.keys.Shards() {
		ms, err := e.rdb.ZRange(wbCtx(e.t), e.keys.AppIndex(shard, "app"), 0, -1).Result()
		require.NoError(e.t, err)
		for _, m := range ms {
			u, s, err := cache.ParseAppIndexMember(m)
			require.NoError(e.t, err)
			out = append(out, u+"/"+s)
		}
	}
	return out
}
