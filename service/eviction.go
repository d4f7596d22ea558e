package service

import (
	"context"
	"fmt"
	"log/slog"
	"sort"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/adksession/adksession/cache"
)

// checkEviction refuses a Redis whose maxmemory-policy may evict keys that
// carry no TTL (allkeys-*): with a database behind Redis those are the
// unflushed writes, change logs and indexes, and losing them is silent. It
// checks every master of a cluster. A server that does not tell its policy
// (CONFIG renamed or refused, as on managed Redis, and no maxmemory_policy in
// INFO) is accepted with a warning. docs/operations.md lists the policies.
func checkEviction(ctx context.Context, rdb redis.UniversalClient, logger *slog.Logger) error {
	policies := cache.EvictionPolicies(ctx, rdb)
	addrs := make([]string, 0, len(policies))
	for a := range policies {
		addrs = append(addrs, a)
	}
	sort.Strings(addrs)
	for _, addr := range addrs {
		p := policies[addr]
		switch {
		case p.Err != nil:
			logger.Warn("adksession: cannot read the Redis eviction policy; make sure maxmemory-policy is a volatile-* policy or noeviction",
				"redis", addr, "err", p.Err)
		case strings.HasPrefix(p.Policy, "allkeys-"):
			return fmt.Errorf("%w: redis %s has maxmemory-policy %s, which may evict unflushed writes; use volatile-lru (or another volatile-* policy, or noeviction), or set Config.AllowAllKeysEviction to accept the loss",
				ErrEvictionPolicy, addr, p.Policy)
		case p.Policy != "noeviction" && !strings.HasPrefix(p.Policy, "volatile-"):
			logger.Warn("adksession: unknown Redis eviction policy; make sure it never evicts keys without a TTL",
				"redis", addr, "maxmemory-policy", p.Policy)
		}
	}
	return nil
}
