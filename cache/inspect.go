package cache

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/adksession/adksession/cache/base"
)

// SessionStats is what Redis holds of one session, for operators
// (`adksession inspect`): its meta fields, its shard's write-behind, and
// the memory of each of its keys.
type SessionStats struct {
	Cached  bool // Redis holds the session hash (not a tombstone)
	Deleted bool // the hash is a tombstone: deleted, delete not flushed yet (or a prune's fence)
	// Rev is the session's last sequence number (m:rev), Flushed the last
	// one in the database (m:fl); FirstCached the oldest event Redis holds
	// (m:first) and CachedEvents how many it holds.
	Rev, Flushed, FirstCached, CachedEvents int64
	// Shard is the session's shard; ShardBacklog its change log's length,
	// ShardOldest the time of its oldest entry (zero when empty) and
	// ShardDeadLetters the length of its dead-letter list.
	Shard            int
	ShardBacklog     int64
	ShardOldest      time.Time
	ShardDeadLetters int64
	// Memory is MEMORY USAGE in bytes of each key Redis holds, by kind:
	// session, events, event ids, undo, temp, user, user index, app.
	Memory map[string]int64
}

// Inspect reads what Redis holds of a session, in one pipeline, writing
// nothing.
func (s *Store) Inspect(ctx context.Context, ref base.SessionRef) (*SessionStats, error) {
	k := s.keys.Session(ref.App, ref.User, ref.ID)
	sk := s.keys.ShardKeys(k.Shard)
	pipe := s.rdb.Pipeline()
	meta := pipe.HMGet(ctx, k.Session, "m:rev", "m:fl", "m:first", "m:del")
	cached := pipe.ZCard(ctx, k.Events)
	backlog := pipe.XLen(ctx, sk.Log)
	oldest := pipe.XRangeN(ctx, sk.Log, "-", "+", 1)
	dead := pipe.LLen(ctx, sk.Dead)
	kinds := []struct{ kind, key string }{
		{"session", k.Session}, {"events", k.Events}, {"event ids", k.EventIDs}, {"undo", k.Undo}, {"temp", k.Temp},
		{"user", k.User}, {"user index", k.UserIndex}, {"app", s.keys.App(ref.App).State},
	}
	usage := make([]*redis.IntCmd, len(kinds))
	for i, kk := range kinds {
		usage[i] = pipe.MemoryUsage(ctx, kk.key)
	}
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return nil, fmt.Errorf("inspect %s: %w", ref.String(), err)
	}
	st := &SessionStats{Shard: k.Shard, ShardBacklog: backlog.Val(), ShardDeadLetters: dead.Val(),
		CachedEvents: cached.Val(), Memory: map[string]int64{}}
	if msgs := oldest.Val(); len(msgs) > 0 {
		st.ShardOldest = streamIDTime(msgs[0].ID)
	}
	m := meta.Val()
	st.Deleted = m[3] == "1"
	st.Cached = m[0] != nil && !st.Deleted
	nums := []*int64{&st.Rev, &st.Flushed, &st.FirstCached}
	for i, p := range nums {
		if v, ok := m[i].(string); ok {
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				return nil, fmt.Errorf("inspect %s: field %d of its hash: %w", ref.String(), i, err)
			}
			*p = n
		}
	}
	for i, kk := range kinds {
		if n, err := usage[i].Result(); err == nil && n > 0 {
			st.Memory[kk.kind] = n
		}
	}
	return st, nil
}
