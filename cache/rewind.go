package cache

import (
	"context"
	"fmt"

	"github.com/adksession/adksession/cache/base"
)

// UndoIncompleteError is Rewind's answer when the undo records do not reach
// the rewind point (they were trimmed with the events older than the cached
// tail, or lost when Redis evicted them): the caller computes the deltas
// from the full history and calls Rewind again with RewindArgs.Computed.
type UndoIncompleteError struct {
	// CreateState is the session's create-time state as a JSON object,
	// "" when Redis no longer holds it.
	CreateState string
}

func (e *UndoIncompleteError) Error() string {
	return "adksession: undo records do not reach the rewind point"
}

// RewindDelta is a rewind's state and artifact delta computed by the caller
// from the full history, valid at revision Rev.
type RewindDelta struct {
	Rev       int64
	State     []Pair // session key -> JSON value (null for keys that did not exist)
	Artifacts []Pair // file name -> version (-1 for files that did not exist)
}

// RewindArgs are the inputs of Rewind.
type RewindArgs struct {
	base.SessionRef
	Before       string // the invocation to rewind before
	InvocationID string // of the rewind event
	EventID      string // of the rewind event
	Ts           int64  // µs
	// EventPre, EventMid and EventTail are the rewind event's JSON around
	// its timestamp and its deltas: EventPre ends with `"timestamp":`,
	// EventMid follows the timestamp's value and ends with `"stateDelta":`,
	// EventTail follows the artifact delta's value.
	EventPre, EventMid, EventTail string
	// Computed, when set, is the delta to write instead of the one the undo
	// records give; refused with base.ErrStaleSession when the session moved past Rev.
	Computed *RewindDelta
}

// RewindResult is the appended rewind event.
type RewindResult struct {
	Seq, Ts int64
	Event   string // its JSON as stored
}

// Rewind appends a rewind event in one script: it restores the session
// state and artifact versions of the point just before the first event of
// a.Before (see rewind.lua). Errors: ErrNotCached, ErrDeleted, ErrIncomplete,
// ErrInvocationNotFound, *UndoIncompleteError, base.ErrStaleSession (only with Computed).
func (s *Store) Rewind(ctx context.Context, a RewindArgs) (*RewindResult, error) {
	k := s.keys.Session(a.App, a.User, a.ID)
	args := append(s.changeArgs(a.SessionRef, 8), a.Before, a.InvocationID, a.Ts, a.EventPre, a.EventMid, a.EventTail, a.EventID)
	if a.Computed == nil {
		args = append(args, "")
	} else {
		args = append(args, a.Computed.Rev)
		args = appendPairs(args, a.Computed.State)
		args = appendPairs(args, a.Computed.Artifacts)
	}
	v, err := s.write(ctx, rewindScript, []string{k.Session, k.Events, k.Temp, k.UserIndex, k.Log, k.Undo, k.EventIDs}, args...).Slice()
	if err != nil {
		return nil, fmt.Errorf("rewind script: %w", err)
	}
	switch err := rewindStatuses.err(v[0].(int64)); err {
	case nil:
		return &RewindResult{Seq: v[1].(int64), Ts: v[2].(int64), Event: v[3].(string)}, nil
	case errUndoIncomplete:
		c, _ := v[1].(string)
		return nil, &UndoIncompleteError{CreateState: c}
	case base.ErrStaleSession:
		return nil, fmt.Errorf("%w: stored revision %d, delta computed at %d", base.ErrStaleSession, v[1].(int64), a.Computed.Rev)
	default:
		return nil, err
	}
}
