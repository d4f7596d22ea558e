package integration

// Poison isolation in the flusher (docs/design.md, "Poison in the write-behind"):
// every kind of data the database can never take, written straight into
// Redis as a bug or an older version might, next to healthy sessions of the
// same shard and the same user. The flusher dead-letters each poison alone,
// with its reason, and writes everything else; Flush returns.

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/adksession/adksession/integration/testenv"
	"github.com/adksession/adksession/service"
)

// luaFloat is how Lua writes a µs timestamp past 2^53 (9999-12-31): not an
// integer.
const luaFloat = "2.534022144e+17"

// usersInShard returns n user ids of app whose keys share one shard.
func usersInShard(e *wbEnv, app string, n int) []string {
	shard := e.keys.Shard(app, "u0")
	var out []string
	for i := 0; len(out) < n; i++ {
		if u := fmt.Sprintf("u%d", i); e.keys.Shard(app, u) == shard {
			out = append(out, u)
		}
	}
	return out
}

// dropEvent removes an event from the model (it is dead-lettered).
func (m *model) dropEvent(k sessKey, id string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	ms := m.sessions[k]
	ms.events = slices.DeleteFunc(ms.events, func(ev *service.Event) bool { return ev.ID == id })
}

// deadLetters reads every shard's dead-letter list.
func (e *wbEnv) deadLetters() []map[string]any {
	e.t.Helper()
	var out []map[string]any
	for s := range e.keys.Shards() {
		for _, v := range e.rdb.LRange(wbCtx(e.t), e.keys.ShardKeys(s).Dead, 0, -1).Val() {
			var d map[string]any
			require.NoError(e.t, json.Unmarshal([]byte(v), &d), v)
			out = append(out, d)
		}
	}
	return out
}

// replaceEvent rewrites the cached event seq of a session with what edit
// makes of its JSON (or of its whole member, with member set).
func (e *wbEnv) replaceEvent(k sessKey, seq int, edit func(string) string, member bool) {
	e.t.Helper()
	ctx := wbCtx(e.t)
	key := e.sessionKeys(k.app, k.user, k.sid).Events
	zs, err := e.rdb.ZRangeWithScores(ctx, key, 0, -1).Result()
	require.NoError(e.t, err)
	prefix := fmt.Sprintf("%d:", seq)
	for _, z := range zs {
		m := z.Member.(string)
		if !strings.HasPrefix(m, prefix) {
			continue
		}
		repl := prefix + edit(strings.TrimPrefix(m, prefix))
		if member {
			repl = edit(m)
		}
		require.NotEqual(e.t, m, repl)
		_, err := e.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
			p.ZRem(ctx, key, m)
			p.ZAdd(ctx, key, redis.Z{Score: z.Score, Member: repl})
			return nil
		})
		require.NoError(e.t, err)
		return
	}
	e.t.Fatalf("no event %d in %s", seq, key)
}

func TestPoisonIsolation(t *testing.T) {
	t.Parallel()
	e := newWB(t, testenv.RedisURL(t), testenv.FreshDatabase(t), func(c *service.Config) { c.DisableFlusher = true })
	ctx := wbCtx(t)
	users := usersInShard(e, "app", 5)
	u, w, y, z, v := users[0], users[1], users[2], users[3], users[4]
	shard := e.keys.Session("app", u, "").Shard
	require.Equal(t, shard, e.keys.Session("app", v, "").Shard)
	sk := func(user, sid string) sessKey { return sessKey{"app", user, sid} }

	// A session flushed once, whose state later takes a value Postgres refuses.
	later := e.create(e.svc, "app", u, "bad-later", map[string]any{"k": 0})
	e.mustAppend(e.svc, later, "i", "one", map[string]any{"k": 1})
	require.NoError(t, e.svc.NewFlusher(nil).Stop(ctx), "drain, then give the leases up")
	e.mustAppend(e.svc, later, "i", "two", map[string]any{"k": 2})
	e.mustAppend(e.svc, later, "i", "three", map[string]any{"m": 3})
	require.NoError(t, e.rdb.HSet(ctx, e.sessionKeys("app", u, "bad-later").Session, "s:k", `"a\u0000b"`).Err())

	// Healthy sessions: two of user u, one of v, next to the poison.
	var healthy []*service.Session
	for _, k := range []sessKey{sk(u, "h1"), sk(u, "h2"), sk(v, "h3")} {
		s := e.create(e.svc, k.app, k.user, k.sid, map[string]any{"c": 1, "user:h": k.sid})
		for i := range 3 {
			e.mustAppend(e.svc, s, fmt.Sprintf("i%d", i), "fine", map[string]any{"n": i, "user:h" + k.sid: i})
		}
		healthy = append(healthy, s)
	}

	// A session whose meta Lua wrote as a float (a far-future event).
	floaty := e.create(e.svc, "app", u, "floaty", nil)
	e.mustAppend(e.svc, floaty, "i", "x", map[string]any{"n": 1})
	require.NoError(t, e.rdb.HSet(ctx, e.sessionKeys("app", u, "floaty").Session, "m:ut", luaFloat).Err())

	// Events Postgres refuses (a NUL escape), or that cannot be read.
	badEvent := e.create(e.svc, "app", u, "bad-event", nil)
	badMember := e.create(e.svc, "app", u, "bad-member", nil)
	for _, s := range []*service.Session{badEvent, badMember} {
		e.mustAppend(e.svc, s, "i", "one", map[string]any{"n": 1})
		e.mustAppend(e.svc, s, "i", "poisoned", nil)
		e.mustAppend(e.svc, s, "i", "three", map[string]any{"n": 3})
	}
	poisonedEvent := map[string]string{"bad-event": badEvent.Events().At(1).ID, "bad-member": badMember.Events().At(1).ID}
	e.replaceEvent(sk(u, "bad-event"), 2, func(js string) string { return strings.Replace(js, `"poisoned"`, `"a\u0000b"`, 1) }, false)
	e.replaceEvent(sk(u, "bad-member"), 2, func(m string) string { return "x" + m }, true)

	// A session state value Postgres refuses.
	badState := e.create(e.svc, "app", u, "bad-state", map[string]any{"k": 1})
	e.mustAppend(e.svc, badState, "i", "x", map[string]any{"k": 2})
	require.NoError(t, e.rdb.HSet(ctx, e.sessionKeys("app", u, "bad-state").Session, "s:k", `"a\u0000b"`).Err())

	// Users whose state Postgres refuses, each with two healthy sessions.
	userPoison := map[string]string{w: `"a\u0000b"`, y: `1e1000000`, z: `"\ud800"`}
	for _, user := range []string{w, y, z} {
		for _, sid := range []string{"s1", "s2"} {
			s := e.create(e.svc, "app", user, sid, map[string]any{"c": 1})
			e.mustAppend(e.svc, s, "i", "fine", map[string]any{"n": 1, "user:k": sid})
			healthy = append(healthy, s)
		}
		require.NoError(t, e.rdb.HSet(ctx, e.sessionKeys("app", user, "").User, "s:bad", userPoison[user]).Err())
	}

	// An app whose state Postgres refuses.
	appSess := e.create(e.svc, "app2", u, "a1", nil)
	e.mustAppend(e.svc, appSess, "i", "fine", map[string]any{"app:a": 1, "n": 1})
	healthy = append(healthy, appSess)
	require.NoError(t, e.rdb.HSet(ctx, e.keys.App("app2").State, "s:bad", `"a\u0000b"`).Err())

	// Change-log entries that cannot be read, among the others.
	log := e.keys.ShardKeys(shard).Log
	inc := fmt.Sprint(healthy[0].LastUpdateTime().UnixMicro())
	for _, entry := range [][]any{
		{"k", "a", "a", "app", "u", u, "i", "h1", "n", inc, "q", "99", "t", luaFloat},
		{"k", "z", "a", "app", "u", u, "i", "h1"},
		{"k", "a", "n", inc},
	} {
		require.NoError(t, e.rdb.XAdd(ctx, &redis.XAddArgs{Stream: log, Values: entry}).Err())
	}

	// A flusher of another process drains it all: Flush returns.
	other := e.open(func() service.Config { c := e.cfg; c.DisableFlusher = false; return c }())
	fctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	require.NoError(t, other.Flush(fctx), "Flush returns although the log holds poison")
	require.Zero(t, e.backlog(other).Entries)

	// Postgres holds everything else, exactly as acknowledged.
	for _, sid := range []string{"floaty", "bad-state", "bad-later"} {
		e.model.deleted("app", u, sid)
	}
	for sid, id := range poisonedEvent {
		e.model.dropEvent(sk(u, sid), id)
	}
	for _, user := range []string{w, y, z} {
		e.model.users[[2]string{"app", user}] = map[string]any{} // the {} row of its first session
	}
	e.model.apps["app2"] = map[string]any{}
	before := readDB(t, e.db)
	// bad-later keeps its row as first flushed; its later events are written all the same.
	require.Equal(t, map[string]any{"k": 1.0}, before.Sessions[sk(u, "bad-later")].State)
	var acked, stored []string
	for ev := range later.Events().All() {
		acked = append(acked, ev.ID)
	}
	for _, ev := range before.Events[sk(u, "bad-later")] {
		stored = append(stored, ev.ID)
	}
	require.Equal(t, acked, stored)
	_, err := e.db.Exec(`DELETE FROM sessions WHERE id = 'bad-later'`) // checked: the rest must equal the model
	require.NoError(t, err)
	rows := checkDB(t, e.db, e.model)
	require.NotContains(t, rows.Sessions, sk(u, "floaty"))
	require.NotContains(t, rows.Sessions, sk(u, "bad-state"))
	require.Len(t, rows.Events[sk(u, "bad-event")], 2)
	require.Equal(t, map[string]any{"h": "h2", "hh1": 2.0, "hh2": 2.0}, rows.Users[[2]string{"app", u}])

	// The dead-letter list holds exactly the poison, each with its reason.
	type dl struct{ unit, who, reason string }
	var got []dl
	for _, d := range e.deadLetters() {
		f, _ := d["fields"].(map[string]any)
		who := fmt.Sprint(f["u"], "/", f["i"])
		switch d["unit"] {
		case "event":
			who += fmt.Sprint("#", d["seq"])
		case "session":
			require.Equal(t, strings.HasSuffix(who, "/bad-later"), d["events_written"], "events of %s written", who)
		case "user state":
			who = fmt.Sprint(f["u"])
			require.Contains(t, d["state"], "bad", "the refused state is in the record")
		case "app state":
			who = fmt.Sprint(f["a"])
		}
		require.NotEmpty(t, d["id"])
		require.NotEmpty(t, d["time"])
		got = append(got, dl{fmt.Sprint(d["unit"]), who, fmt.Sprint(d["reason"])})
	}
	want := []dl{
		{"app state", "app2", "22P05"},
		{"entry", "<nil>/<nil>", "missing session identity"},
		{"entry", u + "/h1", "unknown kind"},
		{"entry", u + "/h1", "field t: \"" + luaFloat + "\" is not an integer"},
		{"event", u + "/bad-event#2", "22P05"},
		{"event", u + "/bad-member#<nil>", "event sequence number"},
		{"session", u + "/bad-state", "22P05"},
		{"session", u + "/bad-state", "22P05"},
		{"session", u + "/bad-later", "22P05"},
		{"session", u + "/bad-later", "22P05"},
		{"session", u + "/floaty", "m:ut"},
		{"session", u + "/floaty", "m:ut"},
		{"user state", w, "22P05"},
		{"user state", y, "22003"},
		{"user state", z, "22P02"},
	}
	require.Len(t, got, len(want), "dead letters: %v", got)
	for _, wd := range want {
		i := slices.IndexFunc(got, func(g dl) bool {
			return g.unit == wd.unit && g.who == wd.who && strings.Contains(g.reason, wd.reason)
		})
		require.GreaterOrEqual(t, i, 0, "no dead letter %v among %v", wd, got)
		got = slices.Delete(got, i, i+1)
	}
	require.Equal(t, int64(len(want)), e.backlog(other).Dead)
	require.Equal(t, int64(len(want)), other.FlusherStats().DeadLetters)

	// Keys: what is in the database may expire; a poisoned session or user
	// state keeps its keys (no TTL), so Redis still serves it.
	for _, s := range healthy {
		require.Positive(t, e.pttl(e.sessionKeys(s.AppName(), s.UserID(), s.ID()).Session), "flushed session %s", s.ID())
	}
	require.Positive(t, e.pttl(e.sessionKeys("app", u, "bad-event").Session))
	require.Positive(t, e.pttl(e.sessionKeys("app", u, "").User), "user %s: its state is in the database", u)
	for _, sid := range []string{"floaty", "bad-state", "bad-later"} {
		require.Equal(t, time.Duration(-1), e.pttl(e.sessionKeys("app", u, sid).Session), "poisoned session %s", sid)
	}
	for _, user := range []string{w, y, z} {
		require.Equal(t, time.Duration(-1), e.pttl(e.sessionKeys("app", user, "").User), "poisoned user state of %s", user)
	}

	// The poisoned user state is dead-lettered once, not again with the
	// next change of one of its sessions; that change is written.
	s1 := healthy[3]
	require.Equal(t, w, s1.UserID())
	e.mustAppend(e.svc, s1, "j", "later", map[string]any{"n": 2})
	require.NoError(t, other.Flush(fctx))
	require.Len(t, e.deadLetters(), len(want))
	checkDB(t, e.db, e.model)
}
