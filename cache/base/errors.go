// Package base holds what every layer of adksession names alike: the error
// identity (service re-exports each error, so an error is the same whichever
// layer detects it) and the domain's nouns (the change log's kinds, a
// state's owner, a session's name in messages). It imports nothing of the
// module: cache, persist, loader and service all use it. Like the other
// building blocks it is internal to adksession.
package base

import (
	"errors"
	"fmt"
)

// The errors a caller of adksession can get, under the names service
// re-exports them by (service.ErrNotFound is ErrNotFound), so every error
// has one identity and one name whichever layer detects it; the building
// blocks below service return these, wrapped with what was wrong and with
// which session (see SessionError).
var (
	// ErrNotFound: no such session (or invocation, or dead letter); the
	// message says which.
	ErrNotFound = errors.New("adksession: not found")
	// ErrAlreadyExists: a session id the (app, user) already has, or an event id
	// the session holds for another event.
	ErrAlreadyExists = errors.New("adksession: already exists")
	// ErrStaleSession: a write through a handle older than the stored session, or
	// from before the session was deleted and created again.
	ErrStaleSession = errors.New("adksession: session handle is stale")
	// ErrInvalidArgument: bad input; the message names the field and the
	// reason.
	ErrInvalidArgument = errors.New("adksession: invalid argument")
	// ErrRedisFull: Redis refused a write because it reached maxmemory (its
	// OOM reply is wrapped). Nothing was written. The write-behind's own
	// writes still run (their scripts are allowed when Redis is full), and
	// flushed, idle sessions become evictable, so under a volatile-* policy
	// Redis frees memory by itself as the flusher catches up; retry later.
	ErrRedisFull = errors.New("adksession: redis is full (maxmemory reached)")
	// ErrNotReplicated: a write was applied on the master but fewer
	// replicas than service.Config.WaitReplicas confirmed it in time; it is
	// not acknowledged (it may survive, or be lost in a failover).
	ErrNotReplicated = errors.New("adksession: write not confirmed by enough replicas")
)

// SessionError is kind (one of the errors above) about one session: the one
// place that names a session in an error.
func SessionError(kind error, app, user, sid string) error {
	return fmt.Errorf("%w: %s", kind, SessionName(app, user, sid))
}

// SessionName names a session in messages: "session <sid> of app <app>,
// user <user>".
func SessionName(app, user, sid string) string {
	return fmt.Sprintf("session %s of app %s, user %s", sid, app, user)
}

// StateCapError is a write refused, with nothing written, because the
// state of its scope would pass its byte cap (the scripts' -12, -13 and
// -14): the session's, the user's or the app's keys and JSON values,
// summed (docs/design.md, "State totals"). It is ErrInvalidArgument.
type StateCapError struct {
	Field string // the cap's Config field: MaxSessionStateBytes, MaxUserStateBytes or MaxAppStateBytes
	Scope string // "session <sid> of app <app>, user <user>", "user <user> of app <app>", "app <app>"
	Bytes int64  // the state's total with the write
	Cap   int64
}

func (e *StateCapError) Error() string {
	return fmt.Sprintf("%v: state of %s: %d bytes of keys and values with this write, limit %d (Config.%s)", ErrInvalidArgument, e.Scope, e.Bytes, e.Cap, e.Field)
}

// Unwrap makes errors.Is(err, ErrInvalidArgument) hold.
func (e *StateCapError) Unwrap() error { return ErrInvalidArgument }
