package integration

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/adksession/adksession/integration/testenv"
	"github.com/adksession/adksession/lua"
	"github.com/adksession/adksession/service"
)

// TestDeadLetteredSessionRetried: the database refuses a session's row, so
// its create, e1 and e2 are dead-lettered; the refusal is lifted, e3 is
// appended and flushed; every dead letter is retried, in log order or in
// reverse. The database ends with e1, e2, e3 in order, and until the
// letters are retried the session's keys get no TTL (Redis alone holds e1
// and e2). Dropping the letters instead releases the keys.
func TestDeadLetteredSessionRetried(t *testing.T) {
	t.Parallel()
	for _, mode := range []string{"in order", "reversed", "dropped"} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			e := newWB(t, testenv.RedisURL(t), testenv.FreshDatabase(t), nil)
			ctx := wbCtx(t)
			_, err := e.db.ExecContext(ctx, `ALTER TABLE sessions ADD CONSTRAINT refuse_s CHECK (id <> 's')`)
			require.NoError(t, err)
			k := sessKey{"app", "u", "s"}
			sess := e.create(e.svc, k.app, k.user, k.sid, map[string]any{"c": 0})
			for j := 1; j <= 2; j++ {
				behindEvent(t, e.svc, sess, fmt.Sprint("e", j), j)
			}
			e.flush(e.svc)
			letters := e.sessionLetters(k)
			require.Len(t, letters, 3, "the create, e1 and e2")

			_, err = e.db.ExecContext(ctx, `ALTER TABLE sessions DROP CONSTRAINT refuse_s`)
			require.NoError(t, err)
			behindEvent(t, e.svc, sess, "e3", 3)
			e.flush(e.svc)
			sk := e.sessionKeys(k.app, k.user, k.sid)
			require.Equal(t, time.Duration(-1), e.pttl(sk.Session), "held: Redis alone has e1 and e2")
			require.Equal(t, time.Duration(-1), e.pttl(sk.Events))

			if mode == "dropped" {
				for _, d := range letters {
					require.NoError(t, e.svc.DropDeadLetter(ctx, d.Shard, d.Entry))
				}
				behindEvent(t, e.svc, sess, "e4", 4)
				e.flush(e.svc)
				require.Greater(t, e.pttl(sk.Session), time.Duration(0), "released once the letters are dropped")
				return
			}
			if mode == "reversed" {
				slices.Reverse(letters)
			}
			for _, d := range letters {
				require.NoError(t, e.svc.RetryDeadLetter(ctx, d.Shard, d.Entry))
			}
			e.flush(e.svc)
			require.Empty(t, e.sessionLetters(k), "nothing dead-lettered again")
			e.requireBehindRows(k, 3)
			rows := readDB(t, e.db)
			require.Equal(t, float64(0), rows.Sessions[k].State["c"], "the create-time state")
			require.Greater(t, e.pttl(sk.Session), time.Duration(0), "released once the letters are written")
			e.wipeNamespace()
			e.requireBehindGet(k, 3)
		})
	}
}

// sessionLetters lists the dead letters of session k, in their shard's
// list order.
func (e *wbEnv) sessionLetters(k sessKey) []service.DeadLetter {
	e.t.Helper()
	shards, err := e.svc.DeadLetters(wbCtx(e.t), service.MaxDeadLettersListed)
	require.NoError(e.t, err)
	var out []service.DeadLetter
	for _, sh := range shards {
		for _, d := range sh.Letters {
			if d.AppName == k.app && d.UserID == k.user && d.SessionID == k.sid {
				out = append(out, d)
			}
		}
	}
	return out
}

// TestAckRecordsDeadLettersOnce: two flushers that handled the same entries
// (the first one's lease expired mid-batch) acknowledge them both; each
// dead letter is recorded once, by the first acknowledgement, while its
// entry is still in the change log. A letter with no entry is recorded.
func TestAckRecordsDeadLettersOnce(t *testing.T) {
	t.Parallel()
	e := newWB(t, testenv.RedisURL(t), "", func(c *service.Config) { c.DisableFlusher = true })
	ctx := wbCtx(t)
	sk := e.keys.ShardKeys(0)
	id, err := e.rdb.XAdd(ctx, &redis.XAddArgs{Stream: sk.Log, Values: []any{"k", "z"}}).Result()
	require.NoError(t, err)
	args := []any{2, id, `{"id":"` + id + `","unit":"entry"}`, "", `{"unit":"user state"}`, id}
	for range 2 {
		require.NoError(t, e.rdb.Eval(ctx, lua.Ack, []string{sk.Log, sk.Dead}, args...).Err())
	}
	dead, err := e.rdb.LRange(ctx, sk.Dead, 0, -1).Result()
	require.NoError(t, err)
	require.Equal(t, []string{`{"id":"` + id + `","unit":"entry"}`, `{"unit":"user state"}`, `{"unit":"user state"}`}, dead)
	require.Zero(t, e.rdb.XLen(ctx, sk.Log).Val())
}
