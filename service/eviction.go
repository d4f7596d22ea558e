package service

import (
	"context"
	"fmt"
	"log/slog"
	"sort"
	"strings"
	"sync"

	"github.com/redis/go-redis/v9"
)

// checkEviction refuses a Redis whose maxmemory-policy may evict keys that
// carry no TTL (allkeys-*): with a database behind Redis those are the
// unflushed writes, change logs and indexes, and losing them is silent. It
// checks every master of a cluster. A server that does not tell its policy
// (CONFIG renamed or refused, as on managed Redis, and no maxmemory_policy in
// INFO) is accepted with a warning. docs/operations.md lists the policies.
func checkEviction(ctx context.Context, rdb redis.UniversalClient, logger *slog.Logger) error {
	policies := evictionPolicies(ctx, rdb)
	addrs := make([]string, 0, len(policies))
	for a := range policies {
		addrs = append(addrs, a)
	}
	sort.Strings(addrs)
	for _, addr := range addrs {
		p := policies[addr]
		switch {
		case p.err != nil:
			logger.Warn("adksession: cannot read the Redis eviction policy; make sure maxmemory-policy is a volatile-* policy or noeviction",
				"redis", addr, "err", p.err)
		case strings.HasPrefix(p.policy, "allkeys-"):
			return fmt.Errorf("%w: redis %s has maxmemory-policy %s, which may evict unflushed writes; use volatile-lru (or another volatile-* policy, or noeviction), or set Config.AllowAllKeysEviction to accept the loss",
				ErrEvictionPolicy, addr, p.policy)
		case p.policy != "noeviction" && !strings.HasPrefix(p.policy, "volatile-"):
			logger.Warn("adksession: unknown Redis eviction policy; make sure it never evicts keys without a TTL",
				"redis", addr, "maxmemory-policy", p.policy)
		}
	}
	return nil
}

// policyRead is what one server said of its maxmemory-policy.
type policyRead struct {
	policy string
	err    error
}

// evictionPolicies reads the maxmemory-policy of the server, or of every
// master of a cluster, by address.
func evictionPolicies(ctx context.Context, rdb redis.UniversalClient) map[string]policyRead {
	out := map[string]policyRead{}
	var mu sync.Mutex
	read := func(ctx context.Context, c *redis.Client) error {
		p, err := evictionPolicy(ctx, c)
		mu.Lock()
		out[c.Options().Addr] = policyRead{policy: p, err: err}
		mu.Unlock()
		return nil
	}
	switch c := rdb.(type) {
	case *redis.ClusterClient:
		if err := c.ForEachMaster(ctx, read); err != nil {
			out["cluster"] = policyRead{err: err}
		}
	case *redis.Client:
		read(ctx, c)
	default:
		out["redis"] = policyRead{err: fmt.Errorf("client of type %T", rdb)}
	}
	return out
}

// evictionPolicy asks CONFIG GET, then INFO memory (which managed Redis
// services that refuse CONFIG often answer).
func evictionPolicy(ctx context.Context, c *redis.Client) (string, error) {
	v, err := c.ConfigGet(ctx, "maxmemory-policy").Result()
	if p := v["maxmemory-policy"]; err == nil && p != "" {
		return p, nil
	}
	if err == nil {
		err = fmt.Errorf("CONFIG GET maxmemory-policy: no value")
	}
	info, ierr := c.Info(ctx, "memory").Result()
	if ierr == nil {
		for _, line := range strings.Split(info, "\n") {
			if p, ok := strings.CutPrefix(strings.TrimSpace(line), "maxmemory_policy:"); ok && p != "" {
				return p, nil
			}
		}
	}
	return "", err
}
