package service

import (
	"errors"

	"github.com/adksession/adksession/cache"
)

// Sentinel errors, matched with errors.Is. Returned errors wrap them with
// what was wrong and with which id.
var (
	// ErrNotFound: no such session for that app and user.
	ErrNotFound = errors.New("adksession: session not found")
	// ErrAlreadyExists: Create with an id the (app, user) already has.
	ErrAlreadyExists = errors.New("adksession: session already exists")
	// ErrStaleSession: AppendEvent through a handle older than the stored
	// session (another handle appended since); nothing was written. Get the
	// session again, or set Config.ConcurrentAppends.
	ErrStaleSession = errors.New("adksession: session handle is stale")
	// ErrInvalidArgument: bad input; the message names the field and the
	// reason. Nothing was written.
	ErrInvalidArgument = errors.New("adksession: invalid argument")
	// ErrStateKeyNotExist: State().Get of a key the state does not have.
	ErrStateKeyNotExist = errors.New("adksession: state key does not exist")
	// ErrRedisFull: Redis refused a write because it reached maxmemory
	// (Redis's OOM reply is wrapped). Nothing was written. Under a
	// volatile-* policy Redis frees memory by itself as the flusher catches
	// up (flushed, idle sessions become evictable); retry later.
	ErrRedisFull = cache.ErrRedisFull
	// ErrEvictionPolicy: Open refused a Redis whose maxmemory-policy may
	// evict unflushed writes (allkeys-*) with a database behind it; see
	// Config.AllowAllKeysEviction.
	ErrEvictionPolicy = errors.New("adksession: redis eviction policy may lose unflushed writes")
)
