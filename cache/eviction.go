package cache

import (
	"context"
	"fmt"
	"strings"
	"sync"

	"github.com/redis/go-redis/v9"
)

// EvictionPolicy is what one server said of its maxmemory-policy: the
// policy, or why it did not tell.
type EvictionPolicy struct {
	Policy string
	Err    error
}

// EvictionPolicies reads the maxmemory-policy of the server, or of every
// master of a cluster, by address ("cluster" or "redis" for a client that
// could not ask them all).
func EvictionPolicies(ctx context.Context, rdb redis.UniversalClient) map[string]EvictionPolicy {
	out := map[string]EvictionPolicy{}
	var mu sync.Mutex
	read := func(ctx context.Context, c *redis.Client) error {
		p, err := evictionPolicy(ctx, c)
		mu.Lock()
		out[c.Options().Addr] = EvictionPolicy{Policy: p, Err: err}
		mu.Unlock()
		return nil
	}
	switch c := rdb.(type) {
	case *redis.ClusterClient:
		if err := c.ForEachMaster(ctx, read); err != nil {
			out["cluster"] = EvictionPolicy{Err: err}
		}
	case *redis.Client:
		read(ctx, c)
	default:
		out["redis"] = EvictionPolicy{Err: fmt.Errorf("client of type %T", rdb)}
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
