package service

import (
	"database/sql"
	"fmt"
	"log/slog"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/adksession/adksession/cache"
	"github.com/adksession/adksession/persist"
)

// Config configures a Service. The zero value of every field but RedisURL
// (or Redis) is a usable default.
type Config struct {
	// RedisURL is the primary store: "redis://host:port/db",
	// "rediss://..." (TLS), or a cluster "redis+cluster://h1:p1,h2:p2".
	RedisURL string
	// Redis is an existing go-redis client (standalone, cluster, failover
	// or ring of one shard), used instead of RedisURL with its options,
	// hooks, TLS and tracing as configured. Close leaves it open.
	Redis redis.UniversalClient
	// DatabaseURL is where the write-behind persists everything:
	// "postgres://..." or "sqlite:///path/file.db". Empty: no persistence
	// (Redis holds everything and nothing expires).
	DatabaseURL string
	// DB is an existing database handle, used instead of DatabaseURL, of
	// the database DBDialect names: "postgres" or "sqlite" (driver names
	// such as "pgx" or "sqlite3" work too; for a *sqlx.DB x pass x.DB and
	// x.DriverName()). Its schema must be migrated (MigrateDB). Close
	// leaves it open. See persist.OpenDB.
	DB        *sql.DB
	DBDialect string
	// Namespace prefixes every Redis key, so several deployments (or tests)
	// share one Redis without seeing each other. It must not contain '{' or '}'.
	Namespace string
	// Shards is the number of hash-tag shards users are spread over
	// (default 64). It is fixed for the life of a deployment's data: Open
	// refuses a Redis that was written with another value.
	Shards int
	// ConcurrentAppends lets AppendEvent apply an event through a handle
	// that is behind the stored session (state updates are key-level, so
	// nothing is lost) and bring the handle up to date, instead of
	// returning ErrStaleSession (the default, as ADK >= 1.28).
	ConcurrentAppends bool
	// TempTTL bounds how long temp: state of an invocation that is never
	// ended stays in Redis (default 1h).
	TempTTL time.Duration
	// CacheTTL is how long an idle, fully flushed session stays in Redis
	// (default 24h). Only used with a database.
	CacheTTL time.Duration
	// MaxCachedEvents is how many flushed events a session keeps in Redis
	// (default 1000); older ones are read from the database.
	MaxCachedEvents int
	// DisableIndexBuilds keeps a compacted Get that found no compaction
	// index in Redis (Redis lost the session, or holds only its tail) from
	// having one built. Such a read walks the database's indexes, O(log n +
	// k) for k events returned; by default it then has the index built in
	// the background from the whole history (O(n) reads from the database,
	// out of the read's path, one build at a time per Service), and the
	// session's next compacted reads are the index's. Set this where those
	// reads would weigh on the database after Redis lost many sessions at
	// once: each compacted read of such a session then walks the
	// database's indexes again.
	DisableIndexBuilds bool
	// MaxEventBytes caps the JSON size of one stored event, temp: keys
	// removed from its delta (default 1 MiB).
	MaxEventBytes int
	// MaxStateValueBytes caps the JSON size of one state value (default MaxEventBytes).
	MaxStateValueBytes int
	// MaxDeltaKeys caps the keys of one state delta: an event's
	// Actions.StateDelta (temp: keys included) or Create's State
	// (default 1000).
	MaxDeltaKeys int
	// MaxWriteBytes caps the bytes one call sends to Redis: AppendEvent's
	// event JSON plus its temp: keys and values, Create's state keys and
	// values (default 2 × MaxEventBytes, 2 MiB).
	MaxWriteBytes int
	// MaxAppStateBytes, MaxUserStateBytes and MaxSessionStateBytes cap the
	// whole state of an app, of a user (in one app) and of a session: its
	// keys (without the app: or user: prefix) and JSON values, summed. A
	// Create or AppendEvent that would grow a state past its cap is
	// refused with ErrInvalidArgument naming the scope, and writes nothing;
	// a write that does not grow it (overwriting a value with a smaller one)
	// always goes through. Every Get of a session carries its app's and its
	// user's state: these caps keep one user's valid writes from making
	// the reads of every other session of the app carry megabytes. Defaults:
	// 2 × MaxEventBytes (2 MiB) for app and user state, 4 × MaxEventBytes
	// (4 MiB) for a session's, so the largest value an event can carry
	// fits with room. temp: state is not counted (it ends with its
	// invocation). The app cap is checked before the write's first step;
	// two writers of one app racing can pass it by their own changes (see
	// docs/design.md, "State totals"). Rewinds and state read back from the
	// database are never refused.
	MaxAppStateBytes     int
	MaxUserStateBytes    int
	MaxSessionStateBytes int
	// FlushBatchSize is the number of change-log entries the flusher writes
	// per transaction (default 500).
	FlushBatchSize int
	// FlushInterval is the longest an idle flusher waits before it looks at
	// every shard again (default 15 s, a quarter second per shard beyond 60
	// shards). It rarely needs to: the scripts publish on a wake channel
	// when a shard's change log gets its first entry, and an idle flusher
	// waits for that; the poll only catches a wakeup lost while Redis was
	// unreachable and the shards of a flusher that died holding them. A
	// flusher at work passes over the shards back to back; Flush wakes this
	// process's flusher at once.
	FlushInterval time.Duration
	// DisableFlusher keeps this process from running a flusher (others,
	// such as `adksession flush`, drain the change log).
	DisableFlusher bool
	// FlushLeaseTTL is how long a shard stays with a flusher that stopped
	// renewing its lease (default 15s, at least 1s): a flusher renews a
	// shard's lease before each batch of it, so this bounds how long the
	// shards of a process that died wait before another process takes
	// them. A flusher that stops cleanly (Close) gives its shards up at
	// once. Keep it well above the time one batch takes.
	FlushLeaseTTL time.Duration
	// Retention prunes idle sessions in the background, once per
	// Retention.Interval across the fleet (see RetentionConfig and Prune).
	// The zero value prunes nothing.
	Retention RetentionConfig
	// WaitReplicas > 0 acknowledges a write only once that many replicas
	// of its Redis master have it (WAIT, sent in the same round trip), so
	// that a failover loses nothing acknowledged; 0 (default) trusts the
	// master alone. A write not confirmed within WaitTimeout (default 1s)
	// fails with an error (it may still have been applied).
	WaitReplicas int
	WaitTimeout  time.Duration
	// AllowAllKeysEviction lets Open use a Redis whose maxmemory-policy is
	// allkeys-* with a database behind it. Such a policy may evict the keys
	// of unflushed writes, the change logs and the indexes: acknowledged
	// writes are then lost without an error. By default Open refuses it
	// (ErrEvictionPolicy); set this only to accept that risk. With it Open
	// does not read the policy at all.
	AllowAllKeysEviction bool
	// Logger receives the flusher's warnings (default slog.Default()).
	Logger *slog.Logger
}

func (c Config) withDefaults() (Config, error) {
	switch {
	case c.RedisURL == "" && c.Redis == nil:
		return c, fmt.Errorf("%w: Config.RedisURL: empty (and no Config.Redis)", ErrInvalidArgument)
	case c.RedisURL != "" && c.Redis != nil:
		return c, fmt.Errorf("%w: Config.RedisURL and Config.Redis: set one", ErrInvalidArgument)
	case c.DatabaseURL != "" && c.DB != nil:
		return c, fmt.Errorf("%w: Config.DatabaseURL and Config.DB: set one", ErrInvalidArgument)
	case c.DB != nil && !persist.KnownDialect(c.DBDialect):
		return c, fmt.Errorf("%w: Config.DBDialect: %q (name the database of Config.DB: postgres or sqlite)", ErrInvalidArgument, c.DBDialect)
	}
	if c.Shards <= 0 {
		c.Shards = cache.DefaultShards
	}
	if c.TempTTL <= 0 {
		c.TempTTL = time.Hour
	}
	if c.CacheTTL <= 0 {
		c.CacheTTL = 24 * time.Hour
	}
	if c.MaxCachedEvents <= 0 {
		c.MaxCachedEvents = 1000
	}
	if c.MaxEventBytes <= 0 {
		c.MaxEventBytes = 1 << 20
	}
	if c.MaxStateValueBytes <= 0 {
		c.MaxStateValueBytes = c.MaxEventBytes
	}
	if c.MaxDeltaKeys <= 0 {
		c.MaxDeltaKeys = 1000
	}
	if c.MaxWriteBytes <= 0 {
		c.MaxWriteBytes = 2 * c.MaxEventBytes
	}
	if c.MaxAppStateBytes <= 0 {
		c.MaxAppStateBytes = 2 * c.MaxEventBytes
	}
	if c.MaxUserStateBytes <= 0 {
		c.MaxUserStateBytes = 2 * c.MaxEventBytes
	}
	if c.MaxSessionStateBytes <= 0 {
		c.MaxSessionStateBytes = 4 * c.MaxEventBytes
	}
	if c.FlushBatchSize <= 0 {
		c.FlushBatchSize = 500
	}
	if c.FlushInterval <= 0 {
		c.FlushInterval = max(15*time.Second, time.Duration(c.Shards)*time.Second/4)
	}
	if c.WaitTimeout <= 0 {
		c.WaitTimeout = time.Second
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	var err error
	if c.Retention, err = c.Retention.withDefaults(c.DatabaseURL != "" || c.DB != nil); err != nil {
		return c, err
	}
	switch {
	case c.FlushLeaseTTL == 0:
		c.FlushLeaseTTL = 15 * time.Second
	case c.FlushLeaseTTL < time.Second:
		return c, fmt.Errorf("%w: Config.FlushLeaseTTL: %s, must be at least 1s (a live flusher could lose its shards between two batches)", ErrInvalidArgument, c.FlushLeaseTTL)
	}
	return c, nil
}
