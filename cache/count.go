package cache

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"

	"github.com/redis/go-redis/v9"
)

// CountSessions counts the session hashes Redis holds (deleted sessions
// whose tombstone awaits the flusher included), for dashboards. It SCANs
// the keyspace (every master of a cluster): O(keys), so call it seldom.
func CountSessions(ctx context.Context, rdb redis.UniversalClient, k Keys) (int64, error) {
	pattern := globEscape(k.prefix) + "{[0-9]*}:s:*"
	var n atomic.Int64
	scan := func(ctx context.Context, c *redis.Client) error {
		iter := c.Scan(ctx, 0, pattern, 1000).Iterator()
		for iter.Next(ctx) {
			n.Add(1)
		}
		return iter.Err()
	}
	var err error
	switch c := rdb.(type) {
	case *redis.ClusterClient:
		err = c.ForEachMaster(ctx, scan)
	case *redis.Client:
		err = scan(ctx, c)
	default:
		return 0, fmt.Errorf("count sessions: unsupported client %T", rdb)
	}
	if err != nil {
		return 0, fmt.Errorf("count sessions: %w", err)
	}
	return n.Load(), nil
}

// globEscape escapes the glob metacharacters of SCAN MATCH.
func globEscape(s string) string {
	r := strings.NewReplacer(`\`, `\\`, `*`, `\*`, `?`, `\?`, `[`, `\[`, `]`, `\]`)
	return r.Replace(s)
}
