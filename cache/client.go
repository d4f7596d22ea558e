package cache

import (
	"context"
	"errors"
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
		cc := redis.NewClusterClient(opt)
		followFailovers(cc)
		return cc, nil
	default:
		return nil, fmt.Errorf("redis url %q: unknown scheme %q", rawURL, scheme)
	}
}

// followFailovers has cc reload its cluster state (the slot map) whenever a
// command to one of its nodes fails for want of an answer: a connection
// refused, reset or timed out. go-redis reloads the map on a MOVED, ASK or
// READONLY reply and otherwise only every ClusterStateReloadInterval (60 s),
// so a node the map names a slot's master that died (or was demoted by a
// failover the client did not see, and then died) answers nothing that
// would correct it, and the slot's commands fail for up to a minute after
// the cluster has a new master (docs/design.md, "Redis faults"). The reload
// runs in the background, at most one at a time and one more requested
// during it (go-redis's LazyReload); the commands' own retries, and the
// next calls, find the new master. The hook is on every node client, so
// it also covers the commands the store sends to a node it picked itself
// (Store.masterFor).
func followFailovers(cc *redis.ClusterClient) {
	h := reloadOnConnError{cc}
	cc.OnNewNode(func(node *redis.Client) { node.AddHook(h) })
}

type reloadOnConnError struct{ cc *redis.ClusterClient }

func (h reloadOnConnError) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h reloadOnConnError) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		h.after(ctx, err)
		return err
	}
}

func (h reloadOnConnError) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		h.after(ctx, err)
		return err
	}
}

// after reloads the state when err is no reply of the node's (a Redis error
// reply, redis.Nil among them, says the node is there) and not the end of
// the caller's context or of the client.
func (h reloadOnConnError) after(ctx context.Context, err error) {
	var reply redis.Error
	if err == nil || errors.As(err, &reply) || errors.Is(err, context.Canceled) ||
		errors.Is(err, redis.ErrClosed) {
		return
	}
	h.cc.ReloadState(ctx)
}
