// Package service is adksession's public API: a session service for agents
// built on Google's Agent Development Kit model. A session is (app, user,
// id), an ordered list of events and a state with four scopes. Redis is the
// primary store: every write is one atomic Lua script. See the README for
// the consistency model.
package service

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/adksession/adksession/cache"
	"github.com/adksession/adksession/loader"
	"github.com/adksession/adksession/persist"
)

// Service is a session service over one Redis deployment (and, with
// Config.DatabaseURL, a database behind it). It is safe for concurrent use
// by many goroutines; many processes may share the same Redis.
type Service struct {
	cfg     Config
	rdb     redis.UniversalClient
	ownRDB  bool // opened from Config.RedisURL: Close closes it
	cache   *cache.Store
	loader  *loader.Loader
	db      *persist.Store  // nil without a database
	flusher *loader.Flusher // nil without a database or with DisableFlusher
	prunes  pruneStats
	// pruneHook, set by tests of this package, runs at each stage of a
	// prune's batch (loader.PruneRead, loader.PruneFenced).
	pruneHook func(loader.PruneStage)
	retention *retention // nil without Config.Retention
	// indexBuilds: the compaction indexes built after a cold compacted read.
	indexBuilds indexBuilds
}

// Open connects to Redis (and the database, whose schema must be migrated:
// see Migrate), or uses the clients Config gives, checks the deployment's
// key layout, loads the scripts and, with a database, starts a flusher
// unless Config.DisableFlusher.
func Open(ctx context.Context, cfg Config) (*Service, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	keys, err := cache.NewKeys(cfg.Namespace, cfg.Shards)
	if err != nil {
		return nil, fmt.Errorf("%w: Config.Namespace: %v", ErrInvalidArgument, err)
	}
	s := &Service{cfg: cfg, rdb: cfg.Redis}
	if s.rdb == nil {
		if s.rdb, err = cache.NewClient(cfg.RedisURL); err != nil {
			return nil, fmt.Errorf("%w: Config.RedisURL: %v", ErrInvalidArgument, err)
		}
		s.ownRDB = true
	}
	fail := func(err error) (*Service, error) {
		if s.db != nil {
			s.db.Close()
		}
		s.closeRedis()
		return nil, err
	}
	if err := s.checkLayout(ctx, keys); err != nil {
		return fail(err)
	}
	if (cfg.DatabaseURL != "" || cfg.DB != nil) && !cfg.AllowAllKeysEviction {
		if err := checkEviction(ctx, s.rdb, cfg.Logger); err != nil {
			return fail(err)
		}
	}
	switch {
	case cfg.DatabaseURL != "":
		s.db, err = persist.Open(ctx, cfg.DatabaseURL)
	case cfg.DB != nil:
		s.db, err = persist.OpenDB(ctx, cfg.DB, cfg.DBDialect)
	}
	if err != nil {
		return fail(fmt.Errorf("open database: %w", err))
	}
	if s.db != nil {
		s.checkNamespaces(ctx, cfg)
	}
	s.cache = cache.NewStore(s.rdb, cache.Options{Keys: keys, Durable: s.db != nil, TempTTL: cfg.TempTTL,
		WaitReplicas: cfg.WaitReplicas, WaitTimeout: cfg.WaitTimeout, Caps: cache.StateCaps{
			Session: int64(cfg.MaxSessionStateBytes), User: int64(cfg.MaxUserStateBytes), App: int64(cfg.MaxAppStateBytes)}})
	if err := s.cache.LoadScripts(ctx); err != nil {
		return fail(err)
	}
	lo := loader.Options{CacheTTL: cfg.CacheTTL, MaxCachedEvents: cfg.MaxCachedEvents,
		Decode: func(recs []cache.EventRecord) (any, error) { return decodeEvents(recs) }}
	if s.db != nil { // a nil *persist.Store in the interfaces would be a database
		lo.DB, lo.Prune = s.db, s.db
	}
	s.loader = loader.New(s.cache, lo)
	if s.db != nil && !cfg.DisableFlusher {
		s.flusher = s.newFlusher(cfg.Logger)
		s.flusher.Start(ctx)
	}
	s.startRetention(ctx, cfg.Retention, cfg.Logger)
	return s, nil
}

// Migrate creates or upgrades the database schema at databaseURL (ADK's
// v1 schema plus adksession's bookkeeping tables). It is idempotent and safe
// to run from several processes at once.
func Migrate(ctx context.Context, databaseURL string) error {
	return persist.Migrate(ctx, databaseURL)
}

// MigrateDB is Migrate on an existing handle (see Config.DB); it leaves db
// open.
func MigrateDB(ctx context.Context, db *sql.DB, dialect string) error {
	return persist.MigrateDB(ctx, db, dialect)
}

// checkNamespaces records this deployment's namespace in the database and
// warns when another one opened it within a day: one database is meant for
// one namespace (two are two caches of the same sessions, whose writes to
// one session the flusher rebases but does not coordinate; docs/operations.md,
// "One database, one namespace"). A database that cannot record it (no
// write grant, say) is warned about too; neither stops Open.
func (s *Service) checkNamespaces(ctx context.Context, cfg Config) {
	others, err := s.db.ClaimNamespace(ctx, cfg.Namespace, time.Now(), 24*time.Hour)
	switch {
	case err != nil:
		cfg.Logger.Warn("adksession: could not record this deployment's namespace in the database", "namespace", cfg.Namespace, "err", err)
	case len(others) > 0:
		cfg.Logger.Warn("adksession: the database also serves other namespaces (one database is meant for one namespace: see docs/operations.md)",
			"namespace", cfg.Namespace, "others", others)
	}
}

// checkLayout records the shard count and the key layout version of the
// deployment on first use and refuses different ones later: the shard count
// is part of every key, and code of another layout version would misread
// the keys (ErrLayoutVersion). A namespace written before the version was
// recorded holds version 1. Once both are recorded it only reads, so Open
// works when Redis is full (a flusher must start then).
func (s *Service) checkLayout(ctx context.Context, keys cache.Keys) error {
	meta := keys.Meta()
	got, err := s.rdb.HMGet(ctx, meta, "shards", "layout").Result()
	if err == nil && (got[0] == nil || got[1] == nil) {
		// A namespace with a shard count and no version was written before
		// the version was recorded: version 1.
		version := cache.LayoutVersion
		if got[0] != nil {
			version = 1
		}
		pipe := s.rdb.TxPipeline()
		pipe.HSetNX(ctx, meta, "shards", keys.Shards())
		pipe.HSetNX(ctx, meta, "layout", version)
		read := pipe.HMGet(ctx, meta, "shards", "layout")
		if _, err = pipe.Exec(ctx); err == nil {
			got = read.Val()
		}
	}
	if err != nil {
		return fmt.Errorf("connect to redis: %w", err)
	}
	if v, _ := got[1].(string); v != strconv.Itoa(cache.LayoutVersion) {
		return fmt.Errorf("%w: this Redis namespace (%q) holds key layout version %s, this version of adksession reads and writes version %d: "+
			"drain it with the version that wrote it, then start this one (docs/operations.md, \"Upgrading\")", ErrLayoutVersion, meta, v, cache.LayoutVersion)
	}
	if v, _ := got[0].(string); v != strconv.Itoa(keys.Shards()) {
		return fmt.Errorf("%w: Config.Shards: %d, but this Redis namespace was written with %s shards", ErrInvalidArgument, keys.Shards(), v)
	}
	return nil
}

// Flush returns once everything acknowledged before the call is in the
// database, or ctx's error. The flushers (this process's, or others' such as
// `adksession flush`) do the writing; Flush waits for them. Without a
// database it returns nil at once.
func (s *Service) Flush(ctx context.Context) error {
	if !s.loader.Durable() {
		return nil
	}
	last, err := s.cache.LastChangeIDs(ctx)
	if err != nil {
		return err
	}
	for {
		var passed <-chan struct{}
		if s.flusher != nil {
			passed = s.flusher.Passed()
			s.flusher.Kick()
		}
		first, err := s.cache.FirstChangeIDs(ctx)
		if err != nil {
			return err
		}
		done := true
		for i := range last {
			if last[i] != "" && first[i] != "" && cache.CompareStreamIDs(first[i], last[i]) <= 0 {
				done = false
				break
			}
		}
		if done {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("flush: %w", ctx.Err())
		case <-passed:
		case <-time.After(50 * time.Millisecond): // flushers of other processes
		}
	}
}

// Close stops this process's background prune (Config.Retention) and its
// flusher after it drained what is pending, then releases the connections.
// The drain retries transient errors (the database restarting, a refused
// connection) with the flusher's capped backoff until ctx ends: give ctx a
// deadline, the drain's budget. Shutdown order: callers stop appending first; then the
// prune, the flusher, the pools.
func (s *Service) Close(ctx context.Context) error {
	var errs []error
	if s.retention != nil {
		s.retention.stop()
	}
	s.stopIndexBuilds()
	if s.flusher != nil {
		errs = append(errs, s.flusher.Stop(ctx))
	}
	if s.db != nil {
		errs = append(errs, s.db.Close())
	}
	errs = append(errs, s.closeRedis())
	return errors.Join(errs...)
}

// closeRedis closes the Redis client Open opened, not one given in Config.
func (s *Service) closeRedis() error {
	if !s.ownRDB {
		return nil
	}
	return s.rdb.Close()
}

// Ready reports whether Redis answers and, with a database, whether the
// database answers and its schema is current (for readiness probes).
func (s *Service) Ready(ctx context.Context) error {
	if err := s.rdb.Ping(ctx).Err(); err != nil {
		return fmt.Errorf("redis: %w", err)
	}
	if s.db != nil {
		return s.db.Ready(ctx)
	}
	return nil
}

// WriteStats count this process's write scripts (appends, creates, deletes,
// rewinds, app-state steps) and the Redis round trips they took: concurrent
// writes share round trips (group commit), so RoundTrips <= Calls.
type WriteStats struct {
	Calls, RoundTrips int64
}

// WriteStats reports the write counters since Open.
func (s *Service) WriteStats() WriteStats {
	c := s.cache.CommitStats()
	return WriteStats{Calls: c.Calls, RoundTrips: c.Batches}
}
