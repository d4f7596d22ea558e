package cache

import (
	"errors"
	"fmt"

	"github.com/adksession/adksession/cache/base"
)

// A script's status is the first element of its reply (the reply itself
// for app_order.lua's and app_apply.lua's plain numbers): 0 or above is
// success, a negative one says why the script wrote nothing (each script's
// header). A number means what its script says: -4 is the user's state not
// cached to append.lua and the app's to app_order.lua, -6 an invocation not
// found to rewind.lua and a lost order to app_apply.lua. So each script has
// one table of the statuses it answers, and each status is named there,
// once; TestStatusTables checks that every `return {-N`, `return -N` and
// `= {-N` of lua/*.lua is in its script's table, and every entry in its
// script.
const (
	codeOK       = 0
	codeCaughtUp = 1 // append.lua: appended by a handle that was behind (concurrent mode)
)

// statuses are the negative statuses of one script and their errors.
type statuses map[int64]error

// err is the error of a script's status (nil for success). A state cap's
// is a fresh *base.StateCapError, for the caller to complete (Store.capped).
func (t statuses) err(code int64) error {
	if code >= 0 {
		return nil
	}
	e, ok := t[code]
	if !ok {
		return fmt.Errorf("adksession: unknown script status %d", code)
	}
	if c, ok := e.(*base.StateCapError); ok {
		cp := *c
		return &cp
	}
	return e
}

// The state totals' caps (lib.lua): the session's, the user's, the app's.
var (
	errSessionCap = &base.StateCapError{Field: "MaxSessionStateBytes"}
	errUserCap    = &base.StateCapError{Field: "MaxUserStateBytes"}
	errAppCap     = &base.StateCapError{Field: "MaxAppStateBytes"}
)

// Statuses the scripts report that never reach a caller of adksession: the
// loader answers them with a cold load from the database (then retries, see
// loader.Run) or maps them to the errors of cache/base.
var (
	ErrNotCached     = errors.New("adksession: session not cached")
	ErrDeleted       = errors.New("adksession: session deleted")
	ErrUserNotCached = errors.New("adksession: user state not cached")
	ErrIncomplete    = errors.New("adksession: cached session incomplete")
	ErrAppNotCached  = errors.New("adksession: app state not cached")
	// ErrAppOrderLost: Redis lost an app's order numbers since a change
	// took its number (see Store.ApplyApp).
	ErrAppOrderLost = errors.New("adksession: app order number taken before Redis lost the app's order")
	// ErrDuplicateEvent: the session holds an event with this id (see
	// DuplicateEventError).
	ErrDuplicateEvent = errors.New("adksession: event id already in session")
	// ErrCheckEventID: the event id is not among the cached events, and
	// older events of the session are in the database only: look it up
	// there (the service), then append with AppendArgs.CheckID false.
	ErrCheckEventID = errors.New("adksession: event id must be looked up in the database")
	// ErrInvocationNotFound: the invocation to rewind before has no event in the session.
	ErrInvocationNotFound = errors.New("adksession: invocation not found in session")
	// errUndoIncomplete: rewind.lua's undo records do not reach the point
	// (Rewind answers an *UndoIncompleteError).
	errUndoIncomplete = errors.New("adksession: undo records do not reach the rewind point")
	// errForkHistory: fork.lua needs the session's history read in full
	// (Fork answers a *ForkHistoryError).
	errForkHistory = errors.New("adksession: the events or undo records Redis holds do not reach the fork point")
)

// The statuses of each script (see its header).
var (
	createStatuses = statuses{-4: ErrUserNotCached, -10: base.ErrAlreadyExists, -12: errSessionCap, -13: errUserCap}
	appendStatuses = statuses{-1: ErrNotCached, -2: ErrDeleted, -3: base.ErrStaleSession, -4: ErrUserNotCached, -5: ErrIncomplete,
		-8: ErrDuplicateEvent, -9: ErrCheckEventID, -12: errSessionCap, -13: errUserCap}
	getStatuses = statuses{-1: ErrNotCached, -2: ErrDeleted, -4: ErrUserNotCached, -5: ErrIncomplete}
	// compacted_calls.lua: the index is gone (read the view from the whole history).
	compactedCallsStatuses = statuses{-5: ErrIncomplete}
	// index_build.lua: the session moved on while the index was built.
	indexBuildStatuses = statuses{-5: ErrIncomplete}
	rewindStatuses     = statuses{-1: ErrNotCached, -2: ErrDeleted, -3: base.ErrStaleSession, -5: ErrIncomplete, -6: ErrInvocationNotFound,
		-7: errUndoIncomplete}
	forkStatuses = statuses{-1: ErrNotCached, -2: ErrDeleted, -3: base.ErrStaleSession, -4: ErrUserNotCached, -5: ErrIncomplete,
		-6: ErrInvocationNotFound, -7: errForkHistory, -10: base.ErrAlreadyExists}
	appOrderStatuses = statuses{-4: ErrAppNotCached, -14: errAppCap}
	appApplyStatuses = statuses{-4: ErrAppNotCached, -6: ErrAppOrderLost}
	// hydrate.lua, hydrate_state.lua and hydrate_index.lua: the read's guard moved.
	hydrateStatuses = statuses{-11: ErrReadOutdated}
)
