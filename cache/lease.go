package cache

import (
	"context"
	"fmt"
	"time"
)

// AcquireLease takes or renews the flusher lease of a shard for owner; it
// reports whether owner holds it. It works when Redis is full.
func (s *Store) AcquireLease(ctx context.Context, shard int, owner string, ttl time.Duration) (bool, error) {
	n, err := s.run(ctx, leaseAcquireScript, []string{s.keys.ShardKeys(shard).Lease}, owner, ttl.Milliseconds()).Int64()
	if err != nil {
		return false, fmt.Errorf("lease of shard %d: %w", shard, err)
	}
	return n == 1, nil
}

// ReleaseLease gives up a shard's lease if owner holds it.
func (s *Store) ReleaseLease(ctx context.Context, shard int, owner string) error {
	if err := s.run(ctx, leaseReleaseScript, []string{s.keys.ShardKeys(shard).Lease}, owner).Err(); err != nil {
		return fmt.Errorf("release lease of shard %d: %w", shard, err)
	}
	return nil
}
