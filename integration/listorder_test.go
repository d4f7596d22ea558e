package integration

// A user's listing is newest update first, by the user's session
// index (us, score = last update µs). Where a session's time changes
// without a script that writes the index (Redis came back with an older
// index, ADK wrote to the database, the flusher rebased the session, a
// batch committed while Redis held none of it), the index follows: a cold
// read puts the session back at its time, the flusher sets the time it
// wrote, a listing repairs the places of the sessions it shows. A walk
// page by page still lists each session once (docs/design.md, "Indexes
// and lists").

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/adksession/adksession/integration/testenv"
	"github.com/adksession/adksession/service"
)

// stampedEvent appends an event stamped at.
func (e *wbEnv) stampedEvent(sess *service.Session, id string, at time.Time) {
	e.t.Helper()
	ev := &service.Event{ID: id, InvocationID: "inv-" + id, Author: "model", Timestamp: at,
		Actions: service.EventActions{StateDelta: map[string]any{"last": id}}}
	require.NoError(e.t, e.svc.AppendEvent(wbCtx(e.t), sess, ev))
}

// evictSession deletes a flushed session's keys, as a volatile-* policy
// may (they carry a TTL).
func (e *wbEnv) evictSession(k sessKey) {
	e.t.Helper()
	sk := e.sessionKeys(k.app, k.user, k.sid)
	require.Greater(e.t, e.pttl(sk.Session), time.Duration(0), "session %s is flushed and idle", k.sid)
	require.NoError(e.t, e.rdb.Del(wbCtx(e.t), sk.Session, sk.Events, sk.EventIDs, sk.Undo, sk.Temp).Err())
}

// indexScore is the session's score in its user's index (-1: not there).
func (e *wbEnv) indexScore(k sessKey) int64 {
	e.t.Helper()
	s, err := e.rdb.ZScore(wbCtx(e.t), e.sessionKeys(k.app, k.user, "").UserIndex, k.sid).Result()
	if err != nil {
		return -1
	}
	return int64(s)
}

// requireIndexAtDB checks that each session's place in the index is its
// update time in the database.
func (e *wbEnv) requireIndexAtDB(ks ...sessKey) {
	e.t.Helper()
	rows := readDB(e.t, e.db)
	for _, k := range ks {
		require.Equal(e.t, rows.Sessions[k].UpdateUS, e.indexScore(k), "index place of %s = its update time in the database", k.sid)
	}
}

// walk lists the user's sessions page by page; it returns "id@µs" of each
// in the order listed.
func (e *wbEnv) walk(app, user string, size int) []string {
	e.t.Helper()
	var out []string
	token := ""
	for range 100 {
		resp, err := e.svc.List(wbCtx(e.t), &service.ListRequest{AppName: app, UserID: user, PageSize: size, PageToken: token})
		require.NoError(e.t, err)
		for _, s := range resp.Sessions {
			out = append(out, fmt.Sprintf("%s@%d", s.ID(), s.LastUpdateTime().UnixMicro()))
		}
		if token = resp.NextPageToken; token == "" {
			return out
		}
	}
	e.t.Fatal("a walk of more than 100 pages")
	return nil
}

// listed is the "id@µs" of sessions as the database holds them, in the
// order given.
func (e *wbEnv) listed(ks ...sessKey) []string {
	e.t.Helper()
	rows := readDB(e.t, e.db)
	var out []string
	for _, k := range ks {
		out = append(out, fmt.Sprintf("%s@%d", k.sid, rows.Sessions[k].UpdateUS))
	}
	return out
}

// TestListFollowsDatabaseTimes: sessions a and b of one user, flushed, b
// updated last; then a's time moves on where no script writes the index,
// and their keys are evicted. A listing of one page and a walk with pages
// of one session list a first; after a cold read (Get) or a listing the
// index holds the database's times.
func TestListFollowsDatabaseTimes(t *testing.T) {
	t.Parallel()
	base := time.Now().Add(-time.Hour).Truncate(time.Millisecond)
	routes := []struct {
		name string
		// moveOn makes a's update time in the database later than b's
		// without Redis's index knowing.
		moveOn func(e *wbEnv, a *service.Session)
	}{
		{"IndexPutBack", func(e *wbEnv, a *service.Session) {
			// Redis comes back with the index as it was (RESTORE; an RDB
			// restart takes it so too): a's newer time is not in it.
			us := e.sessionKeys("app", "u", "").UserIndex
			old := e.dumpKeys(us)
			e.stampedEvent(a, "a2", base.Add(3*time.Second))
			e.flush(e.svc)
			e.restoreKeys(old, us)
		}},
		{"ADKAppend", func(e *wbEnv, a *service.Session) {
			adkAppend(e.t.(*testing.T), e, sessKey{"app", "u", "a"}, "a2", 2, base.Add(3*time.Second))
		}},
	}
	for _, r := range routes {
		for _, read := range []string{"List", "Walk", "Get"} {
			t.Run(r.name+"/"+read, func(t *testing.T) {
				t.Parallel()
				e := newWB(t, testenv.RedisURL(t), testenv.FreshDatabase(t), nil)
				ka, kb := sessKey{"app", "u", "a"}, sessKey{"app", "u", "b"}
				a := e.create(e.svc, "app", "u", "a", nil)
				b := e.create(e.svc, "app", "u", "b", nil)
				e.stampedEvent(a, "a1", base.Add(time.Second))
				e.stampedEvent(b, "b1", base.Add(2*time.Second))
				e.flush(e.svc)
				r.moveOn(e, a)
				e.evictSession(ka)
				e.evictSession(kb)
				want := e.listed(ka, kb)
				switch read {
				case "List":
					require.Equal(t, want, e.walk("app", "u", 10), "one page, newest first")
				case "Walk":
					// The walk that finds the index behind lists each
					// session once; its second page finds a, which the first
					// should have shown.
					got := e.walk("app", "u", 1)
					require.ElementsMatch(t, want, got, "each session once")
				case "Get":
					_, err := e.svc.Get(wbCtx(t), &service.GetRequest{AppName: "app", UserID: "u", SessionID: "a"})
					require.NoError(t, err)
				}
				e.requireIndexAtDB(ka, kb)
				require.Equal(t, want, e.walk("app", "u", 1), "a walk with pages of one, newest first")
			})
		}
	}
}

// timeWentDown leaves sessions c and d of app/u flushed and evicted, with
// c's place in the index (us) above d's while its time, after a delete and
// a create again, is below: the index as Redis had it before.
func timeWentDown(e *wbEnv) (kc, kd sessKey, us string) {
	e.t.Helper()
	kc, kd = sessKey{"app", "u", "c"}, sessKey{"app", "u", "d"}
	c := e.create(e.svc, "app", "u", "c", nil)
	d := e.create(e.svc, "app", "u", "d", nil)
	e.stampedEvent(c, "c1", time.Date(2150, 1, 1, 0, 0, 0, 0, time.UTC))
	e.stampedEvent(d, "d1", time.Now().Add(time.Hour).Truncate(time.Millisecond))
	e.flush(e.svc)
	us = e.sessionKeys("app", "u", "").UserIndex
	old := e.dumpKeys(us)
	e.delete(e.svc, "app", "u", "c")
	e.flush(e.svc)
	e.create(e.svc, "app", "u", "c", nil)
	e.flush(e.svc)
	e.evictSession(kc)
	e.evictSession(kd)
	e.restoreKeys(old, us)
	return kc, kd, us
}

// TestListWalkAfterTimeWentDown: a session deleted and created again has
// an older update time than its earlier incarnation, whose place an index
// Redis got back older still holds. A walk with pages of one session
// lists the other session first and each once: the repaired session is
// left to the page that reaches its new place.
func TestListWalkAfterTimeWentDown(t *testing.T) {
	t.Parallel()
	e := newWB(t, testenv.RedisURL(t), testenv.FreshDatabase(t), nil)
	kc, kd, _ := timeWentDown(e)

	want := e.listed(kd, kc)
	require.Equal(t, want, e.walk("app", "u", 1), "newest first, each once")
	e.requireIndexAtDB(kc, kd)
	require.Equal(t, want, e.walk("app", "u", 10))
}

// TestListAfterRebase: ADK appends to a session whose flushed copy Redis
// holds, at a time after another session's; adksession appends to the copy
// at an earlier time, and the flush rebases the event after ADK's. The
// copy goes, and the index holds the time the flush wrote before anything
// reads the session.
func TestListAfterRebase(t *testing.T) {
	t.Parallel()
	e := newWB(t, testenv.RedisURL(t), testenv.FreshDatabase(t), nil)
	base := time.Now().Truncate(time.Millisecond)
	ka, kb := sessKey{"app", "u", "a"}, sessKey{"app", "u", "b"}
	a := e.create(e.svc, "app", "u", "a", nil)
	b := e.create(e.svc, "app", "u", "b", nil)
	e.stampedEvent(a, "a1", base.Add(time.Second))
	e.stampedEvent(b, "b1", base.Add(10*time.Minute))
	e.flush(e.svc)
	adkAppend(t, e, ka, "a2", 2, base.Add(time.Hour))
	e.stampedEvent(a, "a3", base.Add(2*time.Second))
	e.flush(e.svc)
	require.Equal(t, time.Duration(-2), e.pttl(e.sessionKeys("app", "u", "a").Session), "the rebased copy is gone")
	e.requireIndexAtDB(ka, kb)
	e.evictSession(kb)
	require.Equal(t, e.listed(ka, kb), e.walk("app", "u", 1))
}

// TestListAfterBatchOverLostCopy: a FLUSHALL while a batch of a's e4..e6
// waits on a row lock; a listing rebuilds the index from the database
// (a at e3's time), and in one case a cold read puts back e1..e3. The
// batch then commits: the index holds the time it wrote, although Redis
// holds no copy of a or an older one.
func TestListAfterBatchOverLostCopy(t *testing.T) {
	t.Parallel()
	for _, cold := range []bool{false, true} {
		t.Run(fmt.Sprint("cold=", cold), func(t *testing.T) {
			t.Parallel()
			srv := testenv.StartRedis(t)
			// The test runs the flusher's passes, so that the batch the
			// row lock holds reads e4..e6 together.
			e := newWB(t, srv.URL, testenv.FreshDatabase(t), func(c *service.Config) { c.DisableFlusher = true })
			f := newManualFlusher(t, e)
			ctx := wbCtx(t)
			base := time.Now().Truncate(time.Millisecond)
			ka, kb := sessKey{"app", "u", "a"}, sessKey{"app", "u", "b"}
			a := e.create(e.svc, "app", "u", "a", nil)
			b := e.create(e.svc, "app", "u", "b", nil)
			for j := 1; j <= 3; j++ {
				e.stampedEvent(a, fmt.Sprint("e", j), base.Add(time.Duration(j)*time.Second))
			}
			e.stampedEvent(b, "b1", base.Add(4*time.Second))
			f.drain()

			lock, err := e.db.BeginTx(ctx, nil)
			require.NoError(t, err)
			defer lock.Rollback()
			_, err = lock.ExecContext(ctx, `SELECT 1 FROM sessions WHERE app_name = $1 AND user_id = $2 AND id = $3 FOR UPDATE`, ka.app, ka.user, ka.sid)
			require.NoError(t, err)
			for j := 4; j <= 6; j++ {
				e.stampedEvent(a, fmt.Sprint("e", j), base.Add(time.Duration(j+1)*time.Second))
			}
			passed := f.pass()
			waitLockWaiter(t, e)
			require.NoError(t, e.rdb.FlushAll(ctx).Err())
			if cold {
				got, err := e.svc.Get(ctx, &service.GetRequest{AppName: "app", UserID: "u", SessionID: "a"})
				require.NoError(t, err)
				require.Equal(t, 3, got.Session.Events().Len())
			}
			require.Equal(t, e.listed(kb, ka), e.walk("app", "u", 10), "before the batch: the database's times")
			require.NoError(t, lock.Commit())
			require.NoError(t, <-passed)
			require.Len(t, readDB(t, e.db).Events[ka], 6, "the batch in flight committed e4..e6")
			e.requireIndexAtDB(ka, kb) // the pass has returned: its marks are in Redis
			if cold {
				e.evictSession(ka)
			}
			require.Equal(t, e.listed(ka, kb), e.walk("app", "u", 1))
		})
	}
}

// afterReadHook runs fn once, after the first transaction that reads key
// with ZRANGE once armed.
type afterReadHook struct {
	key   string
	armed atomic.Bool
	fn    func()
}

func (h *afterReadHook) DialHook(next redis.DialHook) redis.DialHook          { return next }
func (h *afterReadHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }

func (h *afterReadHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		for _, c := range cmds {
			if c.Name() == "zrange" && len(c.Args()) > 1 && c.Args()[1] == h.key && h.armed.CompareAndSwap(true, false) {
				h.fn()
				break
			}
		}
		return err
	}
}

// hooked opens a service of e's configuration whose Redis client runs
// hook.
func (e *wbEnv) hooked(hook redis.Hook) *service.Service {
	e.t.Helper()
	opt, err := redis.ParseURL(e.cfg.RedisURL)
	require.NoError(e.t, err)
	rdb := redis.NewClient(opt)
	e.t.Cleanup(func() { rdb.Close() })
	rdb.AddHook(hook)
	cfg := e.cfg
	cfg.RedisURL, cfg.Redis = "", rdb
	return e.open(cfg)
}

// TestListUserWhileIndexChanges: a page of a user's listing takes more
// than one read of the index when the members the previous page returned
// fill the first; the index changes between them (a session listed before
// moves up, out of the page's range). The walk still lists every session,
// each once (found by the simulation: the second read went on at an
// offset, and skipped the sessions the move shifted into it).
func TestListUserWhileIndexChanges(t *testing.T) {
	t.Parallel()
	e := newWB(t, testenv.RedisURL(t), "", nil)
	base := time.Now().Add(-time.Hour).Truncate(time.Millisecond)
	var sessions []*service.Session
	for i, sid := range []string{"c", "b", "a"} { // a newest
		s := e.create(e.svc, "app", "u", sid, nil)
		e.stampedEvent(s, sid+"1", base.Add(time.Duration(i)*time.Minute))
		sessions = append(sessions, s)
	}
	hook := &afterReadHook{key: e.sessionKeys("app", "u", "").UserIndex}
	hook.fn = func() { e.stampedEvent(sessions[2], "a2", base.Add(time.Hour)) } // a moves up
	lister := e.hooked(hook)

	page := func(token string) ([]string, string) {
		resp, err := lister.List(wbCtx(t), &service.ListRequest{AppName: "app", UserID: "u", PageSize: 1, PageToken: token})
		require.NoError(t, err)
		var ids []string
		for _, s := range resp.Sessions {
			ids = append(ids, s.ID())
		}
		return ids, resp.NextPageToken
	}
	listed, token := page("")
	require.Equal(t, []string{"a"}, listed)
	hook.armed.Store(true) // the second page's first read returns a (skipped) and b
	for range 10 {
		if token == "" {
			break
		}
		var ids []string
		ids, token = page(token)
		listed = append(listed, ids...)
	}
	require.False(t, hook.armed.Load(), "a moved during the second page")
	require.Equal(t, []string{"a", "b", "c"}, listed, "each session once, none skipped")
}

// TestListUserSameTimes: sessions updated at the same µs are listed by id,
// descending, each once, in walks whose pages take several reads of the
// index (the members at the bound's score come again first).
func TestListUserSameTimes(t *testing.T) {
	t.Parallel()
	e := newWB(t, testenv.RedisURL(t), "", nil)
	at := time.Now().Add(-time.Hour).Truncate(time.Millisecond)
	ids := []string{"s0", "s1", "s2", "s3", "s4", "s5", "s6"}
	var want []string
	for i := len(ids) - 1; i >= 0; i-- {
		s := e.create(e.svc, "app", "u", ids[i], nil)
		e.stampedEvent(s, ids[i]+"e", at)
		want = append(want, fmt.Sprintf("%s@%d", ids[i], at.UnixMicro()))
	}
	for _, size := range []int{1, 2, 3, 100} {
		require.Equal(t, want, e.walk("app", "u", size), "pages of %d", size)
	}
}

// TestListRepairedByAnotherListing: two walks of one user find the same
// session at a place above its time (the index put back older, the
// session's time gone down) and the other walk's listing repairs it first.
// The walk whose repair is refused still leaves the session to the page
// that reaches its new place, and lists each session once (found by the
// simulation: the session was listed on the page and again at its new
// place).
func TestListRepairedByAnotherListing(t *testing.T) {
	t.Parallel()
	e := newWB(t, testenv.RedisURL(t), testenv.FreshDatabase(t), nil)
	kc, kd, us := timeWentDown(e)
	want := e.listed(kd, kc)

	// The other listing runs between this walk's read of its first page
	// and the page's repair.
	hook := &afterReadHook{key: us}
	hook.fn = func() {
		_, err := e.svc.List(wbCtx(t), &service.ListRequest{AppName: "app", UserID: "u", PageSize: 10})
		require.NoError(t, err)
	}
	lister := e.hooked(hook)

	hook.armed.Store(true)
	var listed []string
	token := ""
	for range 10 {
		resp, err := lister.List(wbCtx(t), &service.ListRequest{AppName: "app", UserID: "u", PageSize: 1, PageToken: token})
		require.NoError(t, err)
		for _, s := range resp.Sessions {
			listed = append(listed, fmt.Sprintf("%s@%d", s.ID(), s.LastUpdateTime().UnixMicro()))
		}
		if token = resp.NextPageToken; token == "" {
			break
		}
	}
	require.False(t, hook.armed.Load(), "the other listing ran")
	require.Equal(t, want, listed, "newest first, each once")
	e.requireIndexAtDB(kc, kd)
}
