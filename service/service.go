// Package service is adksession's public API: a session service for agents
// built on Google's Agent Development Kit model. A session is (app, user,
// id), an ordered list of events and a state with four scopes. Redis is the
// primary store: every write is one atomic Lua script. See the README for
// the consistency model.
package service

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/redis/go-redis/v9"

	"github.com/adksession/adksession/cache"
	"github.com/adksession/adksession/loader"
)

// Service is a session service over one Redis deployment (and, with
// Config.DatabaseURL, a database behind it). It is safe for concurrent use
// by many goroutines; many processes may share the same Redis.
type Service struct {
	cfg    Config
	rdb    redis.UniversalClient
	cache  *cache.Store
	loader *loader.Loader
}

// Open connects to Redis (and the database), checks the deployment's key
// layout and loads the scripts.
func Open(ctx context.Context, cfg Config) (*Service, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	if cfg.DatabaseURL != "" {
		return nil, fmt.Errorf("%w: Config.DatabaseURL: persistence is not available in this version; leave it empty", ErrInvalidArgument)
	}
	keys, err := cache.NewKeys(cfg.Namespace, cfg.Shards)
	if err != nil {
		return nil, fmt.Errorf("%w: Config.Namespace: %v", ErrInvalidArgument, err)
	}
	rdb, err := cache.NewClient(cfg.RedisURL)
	if err != nil {
		return nil, fmt.Errorf("%w: Config.RedisURL: %v", ErrInvalidArgument, err)
	}
	s := &Service{cfg: cfg, rdb: rdb}
	if err := s.checkLayout(ctx, keys); err != nil {
		rdb.Close()
		return nil, err
	}
	if err := cache.LoadScripts(ctx, rdb); err != nil {
		rdb.Close()
		return nil, fmt.Errorf("load scripts: %w", err)
	}
	s.cache = cache.NewStore(rdb, cache.Options{Keys: keys, Durable: cfg.DatabaseURL != "", TempTTL: cfg.TempTTL})
	s.loader = loader.New(s.cache)
	return s, nil
}

// checkLayout records the shard count of the deployment on first use and
// refuses a different one later: it is part of every key.
func (s *Service) checkLayout(ctx context.Context, keys cache.Keys) error {
	meta := keys.Meta()
	if err := s.rdb.HSetNX(ctx, meta, "shards", keys.Shards()).Err(); err != nil {
		return fmt.Errorf("connect to redis: %w", err)
	}
	got, err := s.rdb.HGet(ctx, meta, "shards").Result()
	if err != nil {
		return fmt.Errorf("connect to redis: %w", err)
	}
	if got != strconv.Itoa(keys.Shards()) {
		return fmt.Errorf("%w: Config.Shards: %d, but this Redis namespace was written with %s shards", ErrInvalidArgument, keys.Shards(), got)
	}
	return nil
}

// Flush returns once everything acknowledged before the call is in the
// database. Without a database it returns nil at once.
func (s *Service) Flush(ctx context.Context) error {
	return nil
}

// Close releases the connections. With a database it first drains the
// write-behind, bounded by ctx.
func (s *Service) Close(ctx context.Context) error {
	return errors.Join(s.Flush(ctx), s.rdb.Close())
}
