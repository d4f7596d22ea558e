package cache

import (
	"context"
	"fmt"

	"github.com/adksession/adksession/cache/base"
)

// ForkHistoryError is Fork's answer when what Redis holds of the session
// forked from does not reach the fork point (events older than the cached
// tail, undo records trimmed, evicted or never kept, the create-time state
// unknown): the caller reads the full history and calls Fork again with
// ForkArgs.Computed.
type ForkHistoryError struct {
	// CreateState is the session's create-time state as a JSON object,
	// "" when Redis does not hold it.
	CreateState string
}

func (e *ForkHistoryError) Error() string { return errForkHistory.Error() }

// ForkHistory is a fork's copy computed by the caller from the full
// history of the session forked from, read at its Incarnation.
type ForkHistory struct {
	Incarnation int64
	CreateState string        // the create-time session state, a JSON object
	State       []Pair        // the session state at the point (key -> JSON value)
	Events      []EventRecord // the events before the point, seqs 1..len, ascending, with their IDs
}

// ForkArgs are the inputs of Fork.
type ForkArgs struct {
	base.SessionRef        // the session forked from
	NewSID          string // the session made, of the same user
	Before          string // the invocation to fork before; "" copies every event
	CreateTime      int64  // µs; also the new session's incarnation
	// Token names this fork call: a run of the script again (its reply
	// lost) finds the session the first run made.
	Token string
	// Computed, when set, is the copy to write instead of the one read from
	// what Redis holds; refused with base.ErrStaleSession when the session forked from
	// is now of another incarnation.
	Computed *ForkHistory
}

// Fork makes session NewSID of copies of SID's events before the first
// event of Before, with SID's session state at that point, in one script
// (see fork.lua). Errors: base.ErrAlreadyExists (NewSID is taken), ErrNotCached,
// ErrDeleted, ErrIncomplete, ErrUserNotCached, ErrInvocationNotFound,
// *ForkHistoryError, base.ErrStaleSession (only with Computed).
func (s *Store) Fork(ctx context.Context, a ForkArgs) error {
	from := s.keys.Session(a.App, a.User, a.ID)
	to := s.keys.Session(a.App, a.User, a.NewSID)
	keys := []string{from.Session, from.Events, from.Undo, from.EventIDs, to.Session, to.Events, to.Temp, to.Undo, to.EventIDs,
		to.User, to.UserIndex, to.AppIndex, to.Log}
	args := append(s.changeArgs(base.SessionRef{App: a.App, User: a.User, ID: a.NewSID}, 5), a.CreateTime, AppIndexMember(a.User, a.NewSID), a.Token, a.Before)
	if c := a.Computed; c == nil {
		args = append(args, "")
	} else {
		args = append(args, c.Incarnation, c.CreateState)
		args = appendPairs(args, c.State)
		args = append(args, len(c.Events))
		for _, e := range c.Events {
			args = append(args, e.Seq, e.Ts, e.ID, e.JSON)
		}
	}
	v, err := s.write(ctx, forkScript, keys, args...).Slice()
	if err != nil {
		return fmt.Errorf("fork script: %w", err)
	}
	err = forkStatuses.err(v[0].(int64))
	if err == errForkHistory {
		c, _ := v[1].(string)
		return &ForkHistoryError{CreateState: c}
	}
	return err
}
