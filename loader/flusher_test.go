package loader

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/jmoiron/sqlx"
	"github.com/stretchr/testify/require"

	"github.com/adksession/adksession/cache"
	"github.com/adksession/adksession/cache/base"
	"github.com/adksession/adksession/persist"
)

// scriptedDB is a FlushDatabase over a real store whose Apply fails as
// told, first: applyErrs are the errors of the next Apply calls (nil: the
// store's). It counts the calls.
type scriptedDB struct {
	*persist.Store
	applyErrs      []error
	applies, eachs int
}

func (d *scriptedDB) Apply(ctx context.Context, b *persist.Batch) error {
	d.applies++
	if len(d.applyErrs) > 0 {
		err := d.applyErrs[0]
		d.applyErrs = d.applyErrs[1:]
		if err != nil {
			return err
		}
	}
	return d.Store.Apply(ctx, b)
}

func (d *scriptedDB) ApplyEach(ctx context.Context, b *persist.Batch) ([]persist.Rejected, error) {
	d.eachs++
	return d.Store.ApplyEach(ctx, b)
}

// TestFlushProtocol runs the flusher's passes on miniredis and SQLite, no
// server, through a database whose Apply fails as the test says: nothing
// is acknowledged in Redis until the database committed (a failed Apply
// leaves the change log and the keys as they were, and writes no row); a
// batch the database refuses for good is written unit by unit (ApplyEach)
// instead; after a commit the rows are ADK's, the log is empty and the
// session's keys carry the cache TTL.
func TestFlushProtocol(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	store, sdb := emptySQL(t)
	db := &scriptedDB{Store: store}

	c, rdb := newMiniRedis(t, true)
	l := New(c, Options{DB: store, CacheTTL: time.Hour, MaxCachedEvents: 10})
	ref := base.SessionRef{App: "a", User: "u", ID: "s"}
	require.NoError(t, l.Run(ctx, ref, func() error {
		return c.Create(ctx, cache.CreateArgs{SessionRef: ref, CreateTime: time.Unix(100, 0).UnixMicro()})
	}))
	appendEvent := func(id string, sec int64) {
		t.Helper()
		pre, post, err := cache.SplitTimestamp(fmt.Appendf(nil, `{"id":%q,"invocationId":"i1","author":"user","timestamp":0}`, id))
		require.NoError(t, err)
		_, err = c.Append(ctx, cache.AppendArgs{SessionRef: ref, NoHandle: true, Ts: time.Unix(sec, 0).UnixMicro(),
			InvocationID: "i1", EventID: id, EventPre: pre, EventPost: post,
			Delta: cache.StateDelta{Session: []cache.Pair{{Key: "k", Value: fmt.Sprint(sec)}}, User: []cache.Pair{{Key: "x", Value: "2"}}}})
		require.NoError(t, err)
	}
	appendEvent("e1", 101)

	f := NewFlusher(db, c, FlusherOptions{BatchSize: 100, Interval: time.Hour, LeaseTTL: time.Minute,
		CacheTTL: time.Hour, MaxCachedEvents: 10, AppState: l})
	x := sqlx.NewDb(sdb, "sqlite")
	logged := func() int64 {
		t.Helper()
		lens, err := c.ChangeLogLengths(ctx)
		require.NoError(t, err)
		var n int64
		for _, v := range lens {
			n += v
		}
		return n
	}
	rows := func(q string) []string {
		t.Helper()
		var out []string
		require.NoError(t, sqlx.SelectContext(ctx, x, &out, q))
		return out
	}
	keys := miniKeys(t).Session(ref.App, ref.User, ref.ID)

	// A transient failure: the database wrote nothing, Redis acknowledged
	// nothing.
	db.applyErrs = []error{errors.New("connection reset by peer")}
	n, err := f.RunOnce(ctx)
	require.Error(t, err)
	require.Zero(t, n)
	require.Equal(t, int64(2), logged(), "the create and the append stay logged")
	require.Empty(t, rows(`SELECT id FROM sessions`))
	require.Empty(t, rows(`SELECT id FROM events`))
	ttl, err := rdb.PTTL(ctx, keys.Session).Result()
	require.NoError(t, err)
	require.Less(t, ttl, time.Duration(0), "no TTL before the database holds the session")

	// The next pass commits, then marks and acknowledges.
	n, err = f.RunOnce(ctx)
	require.NoError(t, err)
	require.Equal(t, 2, n)
	require.Zero(t, logged())
	require.Equal(t, []string{`{"k":101}`}, rows(`SELECT state FROM sessions WHERE id = 's'`))
	require.Equal(t, []string{"e1"}, rows(`SELECT id FROM events`))
	require.Equal(t, []string{`{"x":2}`}, rows(`SELECT state FROM user_states WHERE user_id = 'u'`))
	ttl, err = rdb.PTTL(ctx, keys.Session).Result()
	require.NoError(t, err)
	require.Greater(t, ttl, time.Duration(0), "flushed: the keys may expire")

	// A batch the database refuses for good goes unit by unit: here every
	// unit is accepted, so the event is written and acknowledged.
	appendEvent("e2", 102)
	db.applyErrs = []error{fmt.Errorf("%w: a poisoned row", persist.ErrInvalidBatch)}
	n, err = f.RunOnce(ctx)
	require.NoError(t, err)
	require.Equal(t, 1, n)
	require.Equal(t, 1, db.eachs, "the refused batch went unit by unit")
	require.Zero(t, logged())
	require.Equal(t, []string{"e1", "e2"}, rows(`SELECT id FROM events ORDER BY "timestamp"`))
	require.Equal(t, []string{`{"k":102}`}, rows(`SELECT state FROM sessions WHERE id = 's'`))
	require.Equal(t, 3, db.applies)
}
