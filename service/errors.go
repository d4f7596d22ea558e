package service

import "errors"

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
)
