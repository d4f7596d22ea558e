package loader

import (
	"context"
	"time"

	"github.com/adksession/adksession/cache"
	"github.com/adksession/adksession/persist"
)

// batchReader is what the batch builder reads of Redis: the sessions,
// users and apps of a batch's changes as they are now.
type batchReader interface {
	ReadForFlush(ctx context.Context, refs []cache.FlushRef) ([]cache.FlushRead, error)
	UserStateRev(ctx context.Context, app, user string) (cache.StateRev, error)
	AppStateRev(ctx context.Context, app string) (cache.StateRev, error)
}

// flushCache is everything the flusher needs of Redis: the change log, the
// reads of a batch, the marks after its commit, the shard leases and the
// figures it publishes. cache.Store is one; the batch builder's tests use
// another, without a server (flushcache_test.go).
type flushCache interface {
	batchReader
	ReadChanges(ctx context.Context, shard, count int) (good []cache.Change, bad []cache.DeadLetter, err error)
	MarkFlushed(ctx context.Context, done []cache.Flushed, ttl time.Duration, keep int) error
	Ack(ctx context.Context, shard int, ids []string, dead []cache.DeadLetter) error
	MarkStateDead(ctx context.Context, app, user string, rev int64) error
	AcquireLease(ctx context.Context, shard int, owner string, ttl time.Duration) (bool, error)
	ReleaseLeases(ctx context.Context, owner string) error
	ChangeLogLengths(ctx context.Context) ([]int64, error)
	Wakeups(ctx context.Context) (wake <-chan struct{}, stop func() error)
	Backlog(ctx context.Context) (cache.Backlog, error)
	WriteStats(ctx context.Context, fields map[string]any) error
}

var _ flushCache = (*cache.Store)(nil)

// FlushDatabase is what the flusher writes to the database: a batch in one
// transaction, and, when the database refuses something in it for good
// (persist.IsPermanent), the same batch unit by unit, with the units it
// refused.
type FlushDatabase interface {
	Apply(ctx context.Context, b *persist.Batch) error
	ApplyEach(ctx context.Context, b *persist.Batch) ([]persist.Rejected, error)
}

var _ FlushDatabase = (*persist.Store)(nil)
