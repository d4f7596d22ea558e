package cache

import (
	"context"
	"errors"
	"fmt"

	"github.com/google/uuid"
	"github.com/redis/go-redis/v9"

	"github.com/adksession/adksession/cache/base"
)

// ReadGuard is where a cold read stands against the flusher (docs/design.md,
// "Cold reads"). A read from the database that Redis is to keep may be
// outdated by the time its script runs: the flusher may have written newer
// events or a delete since, and Redis let go of the keys that held them (a
// TTL once flushed, a tombstone removed once its delete is in the
// database). The flusher moves a counter in the shard's read guards hash
// whenever that can happen; a cold read reads the counter before the
// database (Store.ReadGuard), and its script puts the read back only while
// the counter is unchanged, else answers ErrReadOutdated with nothing
// written: read the database again.
type ReadGuard struct {
	key, field, value string
}

// ErrReadOutdated: a cold read's guard moved while it read the database
// (see ReadGuard). Never returned to a caller of adksession: the loader
// reads again.
var ErrReadOutdated = errors.New("adksession: database read outdated by a flush")

// guardEpoch is the field of a read guards hash that holds its epoch: a
// random token set by the first read after the hash was created. The
// counters are fields named by numbers (GuardField).
const guardEpoch = "epoch"

// ReadGuard reads the guard of session ref (ref.ID "": its user's own, for
// the user's state and session index) before a cold read of the database: the
// field's counter and the hash's epoch. A FLUSHALL drops both; a counter
// that starts again from absent after it could come back to the value read,
// the epoch does not (docs/design.md, "Cold reads"). A hash without an epoch
// gets one here (HSETNX, in one transaction with the read): the only write,
// once per hash, so that the common read is a read (a master in a manual
// failover holds back writes for seconds, not reads).
func (s *Store) ReadGuard(ctx context.Context, ref base.SessionRef) (ReadGuard, error) {
	g := ReadGuard{key: s.keys.ShardKeys(s.keys.Shard(ref.App, ref.User)).Guards, field: GuardField(ref)}
	v, err := s.rdb.HMGet(ctx, g.key, g.field, guardEpoch).Result()
	if err == nil && v[1] == nil {
		var read *redis.SliceCmd
		_, err = s.rdb.TxPipelined(ctx, func(pipe redis.Pipeliner) error {
			pipe.HSetNX(ctx, g.key, guardEpoch, uuid.NewString())
			read = pipe.HMGet(ctx, g.key, g.field, guardEpoch)
			return nil
		})
		v = read.Val()
	}
	if err != nil {
		return ReadGuard{}, fmt.Errorf("read guard: %w", err)
	}
	counter, _ := v[0].(string) // nil: absent
	epoch, _ := v[1].(string)
	g.value = counter + "@" + epoch
	return g, nil
}

// MoveGuards moves the guards of sessions and of their users: after a prune
// deleted them from the database (their fences, tombstones with a TTL, may
// go before a cold read that began before the delete puts them back).
func (s *Store) MoveGuards(ctx context.Context, refs []FenceRef) error {
	if len(refs) == 0 {
		return nil
	}
	pipe := s.rdb.Pipeline()
	for _, r := range refs {
		key := s.keys.ShardKeys(s.keys.Shard(r.App, r.User)).Guards
		pipe.HIncrBy(ctx, key, GuardField(r.SessionRef), 1)
		pipe.HIncrBy(ctx, key, GuardField(base.SessionRef{App: r.App, User: r.User}), 1)
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return fmt.Errorf("move read guards: %w", err)
	}
	return nil
}
