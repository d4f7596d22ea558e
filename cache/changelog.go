package cache

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// Change is one entry of a shard's change log, written by the script that
// made the change.
type Change struct {
	ID             string // stream entry id
	Kind           byte   // 'c' create, 'a' append, 'd' delete
	App, User, SID string
	Incarnation    int64
	Seq, Ts        int64  // appends: the event's sequence number and timestamp µs
	AppDelta       string // JSON object of the app: part of the delta, "" when none
	EventID        string // appends with an app delta: the event id
	Fields         map[string]any
}

// parseChange reads a stream entry; an entry it cannot read is returned
// with an error so that the flusher can dead-letter it.
func parseChange(m redis.XMessage) (Change, error) {
	c := Change{ID: m.ID, Fields: m.Values}
	str := func(k string) string { s, _ := m.Values[k].(string); return s }
	num := func(k string) (int64, error) {
		v := str(k)
		if v == "" {
			return 0, nil
		}
		return strconv.ParseInt(v, 10, 64)
	}
	k := str("k")
	if len(k) != 1 || !strings.Contains("cad", k) {
		return c, fmt.Errorf("change %s: unknown kind %q", m.ID, k)
	}
	c.Kind = k[0]
	c.App, c.User, c.SID = str("a"), str("u"), str("i")
	c.AppDelta, c.EventID = str("p"), str("e")
	var err error
	if c.Incarnation, err = num("n"); err == nil {
		if c.Seq, err = num("q"); err == nil {
			c.Ts, err = num("t")
		}
	}
	if err != nil {
		return c, fmt.Errorf("change %s: %w", m.ID, err)
	}
	if c.App == "" || c.User == "" || c.SID == "" {
		return c, fmt.Errorf("change %s: missing session identity", m.ID)
	}
	return c, nil
}

// AcquireLease takes or renews the flusher lease of a shard for owner; it
// reports whether owner holds it.
func (s *Store) AcquireLease(ctx context.Context, shard int, owner string, ttl time.Duration) (bool, error) {
	key := s.keys.ShardKeys(shard).Lease
	ok, err := s.rdb.SetNX(ctx, key, owner, ttl).Result()
	if err != nil || ok {
		return ok, err
	}
	n, err := leaseRenewScript.Run(ctx, s.rdb, []string{key}, owner, ttl.Milliseconds()).Int64()
	return n == 1, err
}

// ReleaseLease gives up a shard's lease if owner holds it.
func (s *Store) ReleaseLease(ctx context.Context, shard int, owner string) error {
	return leaseReleaseScript.Run(ctx, s.rdb, []string{s.keys.ShardKeys(shard).Lease}, owner).Err()
}

// ReadChanges returns up to count of the oldest entries of a shard's change
// log. Entries that cannot be parsed come back in bad, with the reason.
func (s *Store) ReadChanges(ctx context.Context, shard, count int) (good []Change, bad []DeadLetter, err error) {
	msgs, err := s.rdb.XRangeN(ctx, s.keys.ShardKeys(shard).Log, "-", "+", int64(count)).Result()
	if err != nil {
		return nil, nil, fmt.Errorf("read change log of shard %d: %w", shard, err)
	}
	for _, m := range msgs {
		c, err := parseChange(m)
		if err != nil {
			bad = append(bad, DeadLetter{Change: c, Reason: err.Error()})
			continue
		}
		good = append(good, c)
	}
	return good, bad, nil
}

// AckChanges removes flushed entries from a shard's change log.
func (s *Store) AckChanges(ctx context.Context, shard int, ids []string) error {
	if len(ids) == 0 {
		return nil
	}
	return s.rdb.XDel(ctx, s.keys.ShardKeys(shard).Log, ids...).Err()
}

// DeadLetter is a change the database rejected for good, with the reason.
type DeadLetter struct {
	Change Change
	Reason string
}

// PushDeadLetters records rejected changes in the shard's dead-letter list
// and removes them from the change log.
func (s *Store) PushDeadLetters(ctx context.Context, shard int, dl []DeadLetter) error {
	if len(dl) == 0 {
		return nil
	}
	k := s.keys.ShardKeys(shard)
	pipe := s.rdb.TxPipeline()
	ids := make([]string, len(dl))
	for i, d := range dl {
		b, _ := json.Marshal(map[string]any{"id": d.Change.ID, "fields": d.Change.Fields, "reason": d.Reason, "time": time.Now().UTC().Format(time.RFC3339Nano)})
		pipe.RPush(ctx, k.Dead, b)
		ids[i] = d.Change.ID
	}
	pipe.XDel(ctx, k.Log, ids...)
	_, err := pipe.Exec(ctx)
	return err
}

// FlushRef names a session whose changes are being flushed, and what of it.
type FlushRef struct {
	App, User, SID string
	Incarnation    int64
	MinTs, MaxTs   int64 // timestamp range of the events to read (MinTs > MaxTs: none)
}

// FlushRead is what the flusher reads of one session.
type FlushRead struct {
	Snap   *Snapshot // nil when the session is gone or re-created (another incarnation)
	Events []EventRecord
}

// ReadForFlush reads, in one pipeline, the current meta and state of each
// session, its user state and the events in the range of each ref.
func (s *Store) ReadForFlush(ctx context.Context, refs []FlushRef) ([]FlushRead, error) {
	if len(refs) == 0 {
		return nil, nil
	}
	pipe := s.rdb.Pipeline()
	sess := make([]*redis.MapStringStringCmd, len(refs))
	users := make([]*redis.MapStringStringCmd, len(refs))
	evs := make([]*redis.ZSliceCmd, len(refs))
	for i, r := range refs {
		k := s.keys.Session(r.App, r.User, r.SID)
		sess[i] = pipe.HGetAll(ctx, k.Session)
		users[i] = pipe.HGetAll(ctx, k.User)
		if r.MinTs <= r.MaxTs {
			evs[i] = pipe.ZRangeByScoreWithScores(ctx, k.Events, &redis.ZRangeBy{
				Min: strconv.FormatInt(r.MinTs, 10), Max: strconv.FormatInt(r.MaxTs, 10),
			})
		}
	}
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return nil, fmt.Errorf("read sessions to flush: %w", err)
	}
	out := make([]FlushRead, len(refs))
	for i, r := range refs {
		h := sess[i].Val()
		if len(h) == 0 || h["m:del"] == "1" || h["m:inc"] != strconv.FormatInt(r.Incarnation, 10) {
			continue
		}
		flatH := make([]any, 0, 2*len(h))
		for f, v := range h {
			flatH = append(flatH, f, v)
		}
		snap := &Snapshot{}
		if err := snap.parse(flatH, users[i].Val(), []any{}, nil); err != nil {
			return nil, err
		}
		out[i].Snap = snap
		if evs[i] != nil {
			for _, z := range evs[i].Val() {
				rec, err := parseMember(z.Member.(string), strconv.FormatFloat(z.Score, 'f', -1, 64))
				if err != nil {
					return nil, err
				}
				out[i].Events = append(out[i].Events, rec)
			}
		}
	}
	return out, nil
}

// AppStateRev reads an app's state and revision (for the flusher).
func (s *Store) AppStateRev(ctx context.Context, app string) (map[string]string, int64, bool, error) {
	h, err := s.rdb.HGetAll(ctx, s.keys.App(app).State).Result()
	if err != nil {
		return nil, 0, false, fmt.Errorf("read app state: %w", err)
	}
	m, rev, err := stateHash(h)
	return m, rev, len(h) > 0, err
}

// UserStateRev reads a user's state and revision (for the flusher); ok is
// false when Redis holds no state hash for the user.
func (s *Store) UserStateRev(ctx context.Context, app, user string) (map[string]string, int64, bool, error) {
	h, err := s.rdb.HGetAll(ctx, s.keys.Session(app, user, "").User).Result()
	if err != nil {
		return nil, 0, false, fmt.Errorf("read user state: %w", err)
	}
	m, rev, err := stateHash(h)
	return m, rev, len(h) > 0, err
}

// Flushed is what the flusher wrote of one session.
type Flushed struct {
	App, User, SID string
	Incarnation    int64
	Seq            int64 // last seq written; -1 for a flushed delete
	UserRev        int64 // user-state revision written; -1 when none
}

// MarkFlushed records flushed sessions (one pipeline of flushed.lua calls):
// idle, fully flushed keys get ttl (a flushed user's index with its state),
// events beyond keep are trimmed, flushed sessions leave the app index,
// flushed tombstones are removed.
func (s *Store) MarkFlushed(ctx context.Context, done []Flushed, ttl time.Duration, keep int) error {
	if len(done) == 0 {
		return nil
	}
	run := func(eval func(redis.Pipeliner, []string, ...any) *redis.Cmd) ([]*redis.Cmd, error) {
		pipe := s.rdb.Pipeline()
		cmds := make([]*redis.Cmd, len(done))
		for i, d := range done {
			k := s.keys.Session(d.App, d.User, d.SID)
			seq, urev := "", ""
			if d.Seq >= 0 {
				seq = strconv.FormatInt(d.Seq, 10)
			}
			if d.UserRev >= 0 {
				urev = strconv.FormatInt(d.UserRev, 10)
			}
			cmds[i] = eval(pipe, []string{k.Session, k.Events, k.User, k.Undo, k.UserIndex, k.AppIndex, k.EventIDs},
				d.Incarnation, seq, urev, ttl.Milliseconds(), keep, AppIndexMember(d.User, d.SID))
		}
		_, err := pipe.Exec(ctx)
		return cmds, err
	}
	cmds, err := run(func(p redis.Pipeliner, keys []string, args ...any) *redis.Cmd {
		return flushedScript.EvalSha(ctx, p, keys, args...)
	})
	if err != nil && isNoScript(cmds[0].Err()) {
		_, err = run(func(p redis.Pipeliner, keys []string, args ...any) *redis.Cmd {
			return flushedScript.Eval(ctx, p, keys, args...)
		})
	}
	if err != nil {
		return fmt.Errorf("mark flushed: %w", err)
	}
	return nil
}

// Backlog is the state of the write-behind across shards.
type Backlog struct {
	Entries int64         // unflushed change-log entries
	Oldest  time.Time     // time of the oldest unflushed entry (zero when none)
	Lag     time.Duration // age of the oldest unflushed entry
	Dead    int64         // dead letters
}

// Backlog reads the length and oldest entry of every shard's change log.
func (s *Store) Backlog(ctx context.Context) (Backlog, error) {
	pipe := s.rdb.Pipeline()
	n := s.keys.Shards()
	lens := make([]*redis.IntCmd, n)
	firsts := make([]*redis.XMessageSliceCmd, n)
	dead := make([]*redis.IntCmd, n)
	for i := range n {
		k := s.keys.ShardKeys(i)
		lens[i] = pipe.XLen(ctx, k.Log)
		firsts[i] = pipe.XRangeN(ctx, k.Log, "-", "+", 1)
		dead[i] = pipe.LLen(ctx, k.Dead)
	}
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return Backlog{}, fmt.Errorf("read backlog: %w", err)
	}
	var b Backlog
	for i := range n {
		b.Entries += lens[i].Val()
		b.Dead += dead[i].Val()
		if msgs := firsts[i].Val(); len(msgs) > 0 {
			if t := StreamIDTime(msgs[0].ID); b.Oldest.IsZero() || t.Before(b.Oldest) {
				b.Oldest = t
			}
		}
	}
	if !b.Oldest.IsZero() {
		b.Lag = time.Since(b.Oldest)
	}
	return b, nil
}

// ChangeLogLengths returns the number of entries of every shard's change log.
func (s *Store) ChangeLogLengths(ctx context.Context) ([]int64, error) {
	pipe := s.rdb.Pipeline()
	n := s.keys.Shards()
	cmds := make([]*redis.IntCmd, n)
	for i := range n {
		cmds[i] = pipe.XLen(ctx, s.keys.ShardKeys(i).Log)
	}
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return nil, fmt.Errorf("read change log lengths: %w", err)
	}
	out := make([]int64, n)
	for i, c := range cmds {
		out[i] = c.Val()
	}
	return out, nil
}

// LastChangeIDs returns the id of the newest change-log entry of every
// shard ("" for an empty log): Flush waits until each is gone.
func (s *Store) LastChangeIDs(ctx context.Context) ([]string, error) {
	return s.edgeChangeIDs(ctx, true)
}

// FirstChangeIDs returns the id of the oldest entry of every shard's change log.
func (s *Store) FirstChangeIDs(ctx context.Context) ([]string, error) {
	return s.edgeChangeIDs(ctx, false)
}

func (s *Store) edgeChangeIDs(ctx context.Context, newest bool) ([]string, error) {
	pipe := s.rdb.Pipeline()
	n := s.keys.Shards()
	cmds := make([]*redis.XMessageSliceCmd, n)
	for i := range n {
		log := s.keys.ShardKeys(i).Log
		if newest {
			cmds[i] = pipe.XRevRangeN(ctx, log, "+", "-", 1)
		} else {
			cmds[i] = pipe.XRangeN(ctx, log, "-", "+", 1)
		}
	}
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return nil, fmt.Errorf("read change logs: %w", err)
	}
	out := make([]string, n)
	for i, c := range cmds {
		if msgs := c.Val(); len(msgs) > 0 {
			out[i] = msgs[0].ID
		}
	}
	return out, nil
}

// StreamIDTime is the time part of a stream entry id.
func StreamIDTime(id string) time.Time {
	ms, _, _ := strings.Cut(id, "-")
	n, _ := strconv.ParseInt(ms, 10, 64)
	return time.UnixMilli(n)
}

// CompareStreamIDs orders two stream entry ids.
func CompareStreamIDs(a, b string) int {
	am, as, _ := strings.Cut(a, "-")
	bm, bs, _ := strings.Cut(b, "-")
	x, _ := strconv.ParseUint(am, 10, 64)
	y, _ := strconv.ParseUint(bm, 10, 64)
	if x != y {
		if x < y {
			return -1
		}
		return 1
	}
	x, _ = strconv.ParseUint(as, 10, 64)
	y, _ = strconv.ParseUint(bs, 10, 64)
	switch {
	case x < y:
		return -1
	case x > y:
		return 1
	}
	return 0
}

// WriteStats stores the flusher summary for dashboards.
func (s *Store) WriteStats(ctx context.Context, fields map[string]any) error {
	return s.rdb.HSet(ctx, s.keys.Stats(), fields).Err()
}

// Stats reads the flusher summary.
func (s *Store) Stats(ctx context.Context) (map[string]string, error) {
	return s.rdb.HGetAll(ctx, s.keys.Stats()).Result()
}
