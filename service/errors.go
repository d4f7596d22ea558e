package service

import (
	"errors"
	"fmt"

	"github.com/adksession/adksession/cache/base"
	"github.com/adksession/adksession/persist"
)

// Sentinel errors, matched with errors.Is. Returned errors wrap them with
// what was wrong and with which id ("adksession: not found: session s1 of
// app a, user u"). Each is the one identity of its error: the building
// blocks of adksession return these same values.
var (
	// ErrNotFound: no such session for that app and user (or no such
	// invocation to rewind before, or dead letter); the message says which.
	ErrNotFound = base.ErrNotFound
	// ErrAlreadyExists: Create with an id the (app, user) already has, or
	// AppendEvent with an event id the session holds for another event.
	ErrAlreadyExists = base.ErrAlreadyExists
	// ErrStaleSession: AppendEvent through a handle older than the stored
	// session (another handle appended since), or from before the session
	// was deleted and created again; nothing was written. Get the session
	// again, or set Config.ConcurrentAppends.
	ErrStaleSession = base.ErrStaleSession
	// ErrInvalidArgument: bad input; the message names the field and the
	// reason. Nothing was written.
	ErrInvalidArgument = base.ErrInvalidArgument
	// ErrStateKeyNotExist: State().Get of a key the state does not have.
	ErrStateKeyNotExist = errors.New("adksession: state key does not exist")
	// ErrRedisFull: Redis refused a write because it reached maxmemory
	// (Redis's OOM reply is wrapped). Nothing was written. Under a
	// volatile-* policy Redis frees memory by itself as the flusher catches
	// up (flushed, idle sessions become evictable); retry later.
	ErrRedisFull = base.ErrRedisFull
	// ErrNotReplicated: with Config.WaitReplicas, a write fewer replicas
	// confirmed than asked for within Config.WaitTimeout. It is not
	// acknowledged: it may survive, or be lost in a failover.
	ErrNotReplicated = base.ErrNotReplicated
	// ErrSchema: the database's schema is not the one this version of
	// adksession writes (Open, Ready); run Migrate (`adksession migrate`).
	ErrSchema = persist.ErrSchema
	// ErrEvictionPolicy: Open refused a Redis whose maxmemory-policy may
	// evict unflushed writes (allkeys-*) with a database behind it; see
	// Config.AllowAllKeysEviction.
	ErrEvictionPolicy = errors.New("adksession: redis eviction policy may lose unflushed writes")
	// ErrLayoutVersion: Open refused a Redis namespace that holds another
	// version of the key layout than this version of adksession writes
	// (cache.LayoutVersion); see docs/operations.md, "Upgrading".
	ErrLayoutVersion = errors.New("adksession: redis holds another key layout version")
)

// sessionError is kind about one session (see base.SessionError).
func sessionError(kind error, app, user, sid string) error {
	return base.SessionError(kind, app, user, sid)
}

// nilArgument is the error of a nil request, handle or event.
func nilArgument(what string) error {
	return fmt.Errorf("%w: %s: nil", ErrInvalidArgument, what)
}
