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

	"github.com/adksession/adksession/cache/base"
)

// Change is one entry of a shard's change log, written by the script that
// made the change.
type Change struct {
	EntryID string // stream entry id
	Kind    base.ChangeKind
	base.SessionRef
	Incarnation int64
	Seq, Ts     int64  // appends: the event's sequence number and timestamp µs
	AppDelta    []Pair // the app: part of the delta (keys without "app:"), nil when none
	AppOrder    int64  // its order number (Store.AppOrder); 0 when logged without one
	EventID     string // appends with an app delta or user: keys: the event id
	// UserDelta is the user: part of a create's initial state or of an
	// event's delta (keys without "user:"), nil when none: the flusher
	// rebases a user Redis holds behind the database with it when the
	// batch carries no event of the change (docs/design.md).
	UserDelta []Pair
	// Held: a dead letter's entry retried whose session row was refused
	// with its events (StoredDeadLetter.Holds): written now, it releases
	// one of the session's holds (Flushed.Hold).
	Held bool
	// Copied (field x): for an append, 1 when the event is a copy of
	// another session's (a fork), whose user: keys are no write of its
	// own, so a user's rebase does not apply them; for a create, the
	// number of such copies the session starts with (seqs 1 to Copied).
	Copied int64
	Fields map[string]any
}

// heldField marks a retried entry that holds its session (Change.Held).
const heldField = "h"

// parseChange reads a stream entry; an entry it cannot read (a field
// missing, a number that is not an integer) is returned with an error so
// that the flusher can dead-letter it alone.
func parseChange(m redis.XMessage) (Change, error) {
	c := Change{EntryID: m.ID, Fields: m.Values}
	str := func(k string) string { s, _ := m.Values[k].(string); return s }
	kind, ok := base.ParseChangeKind(str("k"))
	if !ok {
		return c, fmt.Errorf("change %s: unknown kind %q", m.ID, str("k"))
	}
	c.Kind = kind
	c.App, c.User, c.ID = str("a"), str("u"), str("i")
	c.EventID = str("e")
	c.Held = str(heldField) == "1"
	if x := str("x"); x != "" {
		n, err := strconv.ParseInt(x, 10, 64)
		if err != nil || n < 0 {
			return c, fmt.Errorf("change %s: field x (copied) %q is not a count", m.ID, x)
		}
		c.Copied = n
	}
	if c.App == "" || c.User == "" || c.ID == "" {
		return c, fmt.Errorf("change %s: missing session identity", m.ID)
	}
	// deltaField reads a delta field (a JSON object) into pairs.
	deltaField := func(field, what string) ([]Pair, error) {
		var delta map[string]json.RawMessage
		if err := json.Unmarshal([]byte(str(field)), &delta); err != nil {
			return nil, fmt.Errorf("change %s: field %s (%s): %w", m.ID, field, what, err)
		}
		var out []Pair
		for k, v := range delta {
			out = append(out, Pair{Key: k, Value: string(v)})
		}
		return out, nil
	}
	var err error
	if str("p") != "" {
		if c.AppDelta, err = deltaField("p", "app delta"); err != nil {
			return c, err
		}
		if o := str("o"); o != "" {
			n, err := strconv.ParseInt(o, 10, 64)
			if err != nil || n <= 0 {
				return c, fmt.Errorf("change %s: field o (app order) %q is not a positive integer", m.ID, o)
			}
			c.AppOrder = n
		}
	}
	if str("w") != "" {
		if c.UserDelta, err = deltaField("w", "user delta"); err != nil {
			return c, err
		}
	}
	nums := []struct {
		field string
		to    *int64
	}{{"n", &c.Incarnation}, {"q", &c.Seq}, {"t", &c.Ts}}
	if c.Kind != base.ChangeAppend {
		nums = nums[:1]
	}
	for _, n := range nums {
		v, err := strconv.ParseInt(str(n.field), 10, 64)
		if err != nil {
			return c, fmt.Errorf("change %s: field %s: %q is not an integer", m.ID, n.field, str(n.field))
		}
		*n.to = v
	}
	return c, nil
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
			bad = append(bad, DeadLetter{Change: c, Unit: DeadEntry, Reason: err.Error()})
			continue
		}
		good = append(good, c)
	}
	return good, bad, nil
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
			if t := streamIDTime(msgs[0].ID); b.Oldest.IsZero() || t.Before(b.Oldest) {
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

// streamIDTime is the time part of a stream entry id.
func streamIDTime(id string) time.Time {
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

// Wakeups subscribes to the flusher's wake channel: a value arrives when a
// script wrote the first entry of a shard's change log (an idle flusher has
// work). The subscription reconnects by itself; a wakeup sent while it was
// reconnecting is lost, so flushers also poll, slowly. stop ends it.
func (s *Store) Wakeups(ctx context.Context) (wake <-chan struct{}, stop func() error) {
	ps := s.rdb.Subscribe(ctx, s.keys.Wake())
	out := make(chan struct{}, 1)
	go func() {
		defer close(out)
		for range ps.Channel() {
			select {
			case out <- struct{}{}:
			default: // one pending wakeup is enough
			}
		}
	}()
	return out, ps.Close
}

// RecentBacklog is the backlog as the flushers last wrote it to the stats
// hash (one command), when a flusher wrote it within maxAge; otherwise (no
// flusher runs, or none has for that long) it is read from every shard
// (Backlog).
func (s *Store) RecentBacklog(ctx context.Context, maxAge time.Duration) (Backlog, error) {
	h, err := s.Stats(ctx)
	if err != nil {
		return Backlog{}, fmt.Errorf("read flusher stats: %w", err)
	}
	num := func(k string) int64 { n, _ := strconv.ParseInt(h[k], 10, 64); return n }
	at := time.UnixMilli(num("updated_ms"))
	if h["updated_ms"] == "" || time.Since(at) > maxAge {
		return s.Backlog(ctx)
	}
	b := Backlog{Entries: num("backlog"), Dead: num("dead_letters")}
	if lag := time.Duration(num("lag_ms")) * time.Millisecond; b.Entries > 0 {
		b.Oldest = at.Add(-lag)
		b.Lag = time.Since(b.Oldest)
	}
	return b, nil
}
