package service

import (
	"context"

	"github.com/redis/go-redis/v9"

	"github.com/adksession/adksession/cache"
)

// Config returns the configuration the service runs with: the Config given
// to Open with every default filled in (Config documents each default). Its
// Redis and DB are the clients the service uses, also when Open made them.
func (s *Service) Config() Config {
	c := s.cfg
	c.Redis = s.rdb
	return c
}

// Redis returns the client the service uses (Config.Redis, or the one Open
// made from Config.RedisURL), for readiness probes and dashboards that read
// Redis's own figures (INFO). It stays the service's: Close closes the one
// Open made. Keys and scripts are the service's business (docs/redis-keys.md
// lists the keys for tools that only read).
func (s *Service) Redis() redis.UniversalClient { return s.rdb }

// CachedSessions counts the sessions Redis holds (deleted sessions whose
// tombstone awaits the flusher included), for dashboards. It SCANs the
// keyspace (every master of a cluster): O(keys), so call it seldom.
func (s *Service) CachedSessions(ctx context.Context) (int64, error) {
	return cache.CountSessions(ctx, s.rdb, s.cache.Keys())
}
