package cache

import (
	"fmt"
	"net/url"
	"strings"

	"github.com/redis/go-redis/v9"
)

// NewClient connects to the Redis named by rawURL:
//
//	redis://[user:pass@]host:port[/db]           standalone
//	rediss://...                                 standalone over TLS
//	redis+cluster://[user:pass@]h1:p1,h2:p2,...  Redis Cluster (seed nodes)
//	rediss+cluster://...                         Redis Cluster over TLS
//
// Query parameters are those of go-redis (dial_timeout, pool_size, ...).
func NewClient(rawURL string) (redis.UniversalClient, error) {
	scheme, rest, ok := strings.Cut(rawURL, "://")
	if !ok {
		return nil, fmt.Errorf("redis url %q: want redis://, rediss://, redis+cluster:// or rediss+cluster://", rawURL)
	}
	switch scheme {
	case "redis", "rediss", "unix":
		opt, err := redis.ParseURL(rawURL)
		if err != nil {
			return nil, fmt.Errorf("redis url: %w", err)
		}
		return redis.NewClient(opt), nil
	case "redis+cluster", "rediss+cluster":
		base := strings.TrimSuffix(scheme, "+cluster")
		u, err := url.Parse(base + "://" + rest)
		if err != nil {
			return nil, fmt.Errorf("redis cluster url: %w", err)
		}
		hosts := strings.Split(u.Host, ",")
		u.Host = hosts[0]
		q := u.Query()
		for _, h := range hosts[1:] {
			q.Add("addr", h)
		}
		u.RawQuery = q.Encode()
		u.Path = ""
		opt, err := redis.ParseClusterURL(u.String())
		if err != nil {
			return nil, fmt.Errorf("redis cluster url: %w", err)
		}
		return redis.NewClusterClient(opt), nil
	default:
		return nil, fmt.Errorf("redis url %q: unknown scheme %q", rawURL, scheme)
	}
}
