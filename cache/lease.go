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

// ReleaseLeases gives up, in one pipeline, every shard lease owner holds:
// another flusher takes those shards on its next poll.
func (s *Store) ReleaseLeases(ctx context.Context, owner string) error {
	_, err := s.pipelined(ctx, leaseReleaseScript, s.keys.Shards(), func(i int) ([]string, []any) {
		return []string{s.keys.ShardKeys(i).Lease}, []any{owner}
	})
	if err != nil {
		return fmt.Errorf("release leases: %w", err)
	}
	return nil
}

// AcquirePruneLease takes the lease of the fleet's background prune for
// owner, for ttl, or renews it when owner holds it; it reports whether
// owner holds it.
func (s *Store) AcquirePruneLease(ctx context.Context, owner string, ttl time.Duration) (bool, error) {
	n, err := s.run(ctx, leaseAcquireScript, []string{s.keys.PruneLease()}, owner, ttl.Milliseconds()).Int64()
	if err != nil {
		return false, fmt.Errorf("prune lease: %w", err)
	}
	return n == 1, nil
}

// ReleasePruneLease gives up the prune lease if owner holds it.
func (s *Store) ReleasePruneLease(ctx context.Context, owner string) error {
	if err := s.run(ctx, leaseReleaseScript, []string{s.keys.PruneLease()}, owner).Err(); err != nil {
		return fmt.Errorf("release prune lease: %w", err)
	}
	return nil
}
