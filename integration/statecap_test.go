package integration

// The caps of the state totals (Config.MaxSessionStateBytes,
// MaxUserStateBytes, MaxAppStateBytes; docs/design.md, "State totals"),
// against real Redis (standalone and the 3-master Cluster) and Postgres.

import (
	"fmt"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/adksession/adksession/integration/testenv"
	"github.com/adksession/adksession/service"
)

func TestStateCapsStandalone(t *testing.T) {
	t.Parallel()
	runStateCaps(t, testenv.RedisURL(t))
}

func TestStateCapsCluster(t *testing.T) {
	t.Parallel()
	runStateCaps(t, testenv.ClusterURL(t))
}

// stateCap is 1 000 bytes for every scope in these tests.
const stateCap = 1000

// capScope is one scope of state: its key prefix in a delta, its cap's
// Config field, and how errors and Redis name it.
type capScope struct {
	name, prefix, field string
	hash                func(e *wbEnv) string // its state hash
	named               string                // in the error
	other               [2]string             // (user, sid) of a session that shares the state but not the writer's session
}

func runStateCaps(t *testing.T, url string) {
	for _, sc := range []capScope{
		{"Session", "", "MaxSessionStateBytes", func(e *wbEnv) string { return e.keys.Session("capapp", "u", "s").Session },
			"state of session s of app capapp, user u", [2]string{"u", "s"}},
		{"User", "user:", "MaxUserStateBytes", func(e *wbEnv) string { return e.keys.Session("capapp", "u", "s").User },
			"state of user u of app capapp", [2]string{"u", "s2"}},
		{"App", "app:", "MaxAppStateBytes", func(e *wbEnv) string { return e.keys.App("capapp").State },
			"state of app capapp", [2]string{"v", "s2"}},
	} {
		t.Run(sc.name, func(t *testing.T) { t.Parallel(); testStateCap(t, url, sc) })
		t.Run(sc.name+"Create", func(t *testing.T) { t.Parallel(); testStateCapCreate(t, url, sc) })
	}
}

// text is a JSON string value of n bytes (quotes included).
func text(n int) string { return strings.Repeat("x", n-2) }

// stateTotal is the total of a state hash counted from its fields (keys
// without "s:" and JSON values); the hash's m:sz must say the same.
func (e *wbEnv) stateTotal(key string) int {
	e.t.Helper()
	n := 0
	h := e.hash(key)
	for f, v := range h {
		if k, ok := strings.CutPrefix(f, "s:"); ok {
			n += len(k) + len(v)
		}
	}
	require.Equal(e.t, strconv.Itoa(n), h["m:sz"], "m:sz of %s", key)
	return n
}

// contents is every key of the namespace with its value: a hash's fields
// and values, any other key's DUMP. (The DUMP of a hash in its hashtable
// encoding, values above 64 bytes, lists the fields in the table's order,
// which a read may change.)
func (e *wbEnv) contents() map[string]string {
	e.t.Helper()
	ctx := wbCtx(e.t)
	out := map[string]string{}
	for _, k := range e.namespaceKeys() {
		kind, err := e.rdb.Type(ctx, k).Result()
		require.NoError(e.t, err)
		if kind == "hash" {
			out[k] = fmt.Sprint(e.hash(k)) // fmt prints a map sorted by key
			continue
		}
		out[k], err = e.rdb.Dump(ctx, k).Result()
		require.NoError(e.t, err)
	}
	return out
}

// refused checks that err is the cap of sc and that the namespace is what
// before was.
func (e *wbEnv) refused(sc capScope, err error, before map[string]string) {
	e.t.Helper()
	require.ErrorIs(e.t, err, service.ErrInvalidArgument)
	require.Contains(e.t, err.Error(), sc.named)
	require.Contains(e.t, err.Error(), "limit 1000 (Config."+sc.field+")")
	require.Equal(e.t, before, e.contents(), "a write refused by a state cap writes nothing")
}

// testStateCap: writes up to a scope's cap go through, the one that would
// pass it is ErrInvalidArgument naming the scope (from another session
// when the state is shared: another session of the user, another user of
// the app), with nothing written; overwriting a value with a smaller one
// frees room; a write that does not grow a state above a lowered cap goes
// through. A rewind keeps the session's total, and after the cache is lost
// and read back from the database the cap holds as before.
func testStateCap(t *testing.T, url string, sc capScope) {
	e := newWB(t, url, testenv.FreshDatabase(t), func(c *service.Config) {
		c.DisableFlusher = true
		c.MaxSessionStateBytes, c.MaxUserStateBytes, c.MaxAppStateBytes = stateCap, stateCap, stateCap
	})
	p := sc.prefix
	sess := e.create(e.svc, "capapp", "u", "s", nil)
	other := sess
	if sc.other[1] != "s" {
		other = e.create(e.svc, "capapp", sc.other[0], sc.other[1], nil)
	}
	// Each entry is its key (without the prefix) and its JSON value: 1 + 602, 1 + 396.
	e.mustAppend(e.svc, sess, "inv-a", "a", map[string]any{p + "a": text(602)})
	e.mustAppend(e.svc, sess, "inv-b", "b", map[string]any{p + "b": text(396)})
	require.Equal(t, stateCap, e.stateTotal(sc.hash(e)), "up to the cap")

	before := e.contents()
	events := other.Events().Len()
	e.refused(sc, e.appendEv(e.svc, other, "inv-c", "c", map[string]any{p + "c": 1}), before)
	require.Equal(t, events, e.getSess("capapp", sc.other[0], sc.other[1]).Events().Len(), "the refused event is not stored")

	// null for a: 1 + 4 bytes. The total goes down, and c fits.
	e.mustAppend(e.svc, sess, "inv-d", "a gone", map[string]any{p + "a": nil})
	require.Equal(t, 402, e.stateTotal(sc.hash(e)))
	e.mustAppend(e.svc, other, "inv-e", "c", map[string]any{p + "c": 1})
	require.Equal(t, 404, e.stateTotal(sc.hash(e)))

	// Under a cap lowered to 100 bytes, a write that does not grow the state goes through, one that grows it
	// does not.
	low := e.cfg
	low.MaxSessionStateBytes, low.MaxUserStateBytes, low.MaxAppStateBytes = 100, 100, 100
	lowSvc := e.open(low)
	e.mustAppend(lowSvc, sess, "inv-f", "b smaller", map[string]any{p + "b": text(300)})
	require.Equal(t, 308, e.stateTotal(sc.hash(e)))
	before = e.contents()
	err := e.appendEv(lowSvc, sess, "inv-g", "b bigger", map[string]any{p + "b": text(301)})
	require.ErrorIs(t, err, service.ErrInvalidArgument)
	require.Contains(t, err.Error(), "limit 100 (Config."+sc.field+")")
	require.Equal(t, before, e.contents())

	if sc.prefix == "" {
		// Before inv-f: b is 396 bytes again, above the lowered cap: a rewind is not refused.
		_, err := lowSvc.Rewind(wbCtx(t), &service.RewindRequest{AppName: "capapp", UserID: "u", SessionID: "s", BeforeInvocationID: "inv-f"})
		require.NoError(t, err)
		require.Equal(t, 404, e.stateTotal(sc.hash(e)), "after a rewind")
		sess = e.getSess("capapp", "u", "s")
		other = sess
	} else {
		e.mustAppend(e.svc, sess, "inv-h", "b back", map[string]any{p + "b": text(396)})
		require.Equal(t, 404, e.stateTotal(sc.hash(e)))
	}

	// The cache lost, the sessions read back from the database: the state's total is counted again.
	e.flushOnce()
	require.Positive(t, e.wipeNamespace())
	sess = e.getSess("capapp", "u", "s")
	other = e.getSess("capapp", sc.other[0], sc.other[1])
	require.Equal(t, map[string]any{p + "a": nil, p + "b": text(396), p + "c": float64(1)}, pick(stateMap(sess), p))
	if sc.prefix != "" {
		require.Equal(t, 404, e.stateTotal(sc.hash(e)), "put back with its total")
	}
	// 404 + 1 + 596 bytes: one too many; 595: up to the cap.
	before = e.contents()
	e.refused(sc, e.appendEv(e.svc, other, "inv-i", "d", map[string]any{p + "d": text(596)}), before)
	e.mustAppend(e.svc, other, "inv-j", "d", map[string]any{p + "d": text(595)})
	require.Equal(t, stateCap, e.stateTotal(sc.hash(e)), "up to the cap after a cache loss")
}

// pick is the keys of m in the scope of prefix ("": session keys).
func pick(m map[string]any, prefix string) map[string]any {
	out := map[string]any{}
	for k, v := range m {
		scoped := strings.HasPrefix(k, "user:") || strings.HasPrefix(k, "app:")
		if prefix == "" && !scoped || prefix != "" && strings.HasPrefix(k, prefix) {
			out[k] = v
		}
	}
	return out
}

// testStateCapCreate: a Create whose initial state would pass a cap is
// ErrInvalidArgument naming the scope, with nothing written; one up to it
// is created, with the state's total.
func testStateCapCreate(t *testing.T, url string, sc capScope) {
	e := newWB(t, url, testenv.FreshDatabase(t), func(c *service.Config) {
		c.DisableFlusher = true
		c.MaxSessionStateBytes, c.MaxUserStateBytes, c.MaxAppStateBytes = stateCap, stateCap, stateCap
	})
	p := sc.prefix
	e.create(e.svc, "capapp", sc.other[0], "first", map[string]any{p + "a": text(499)})
	before := e.contents()
	_, err := e.svc.Create(wbCtx(t), &service.CreateRequest{AppName: "capapp", UserID: "u", SessionID: "s",
		State: map[string]any{p + "b": text(499), p + "c": 1}})
	if sc.prefix == "" {
		// Another session's state is its own: this one's is 1 + 499 + 2 bytes, within the cap.
		require.NoError(t, err)
		e.stateTotal(sc.hash(e))
		before = e.contents()
		_, err = e.svc.Create(wbCtx(t), &service.CreateRequest{AppName: "capapp", UserID: "u", SessionID: "s3",
			State: map[string]any{p + "b": text(999), p + "c": 1}})
		sc.named = "state of session s3 of app capapp, user u"
	}
	e.refused(sc, err, before)
	_, err = e.svc.Create(wbCtx(t), &service.CreateRequest{AppName: "capapp", UserID: "u", SessionID: "s4",
		State: map[string]any{p + "b": text(499)}})
	require.NoError(t, err)
	if sc.prefix != "" {
		require.Equal(t, stateCap, e.stateTotal(sc.hash(e)), "up to the cap")
	}
}
