package service

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/google/uuid"

	"github.com/adksession/adksession/cache"
	"github.com/adksession/adksession/cache/base"
)

// ForkRequest names a session to fork, the new session and the point.
type ForkRequest struct {
	AppName, UserID string
	// SessionID is the session forked from.
	SessionID string
	// NewSessionID is the session made: empty gets a UUIDv4.
	NewSessionID string
	// BeforeInvocationID: the new session gets the events before the first
	// event of this invocation; empty: all of them.
	BeforeInvocationID string
}

// ForkResponse holds the new session.
type ForkResponse struct{ Session *Session }

// forkAttempts bounds how often a fork computed from the full history is
// tried again when the session forked from is created again meanwhile.
const forkAttempts = 5

// Fork creates session NewSessionID of the same app and user holding
// copies of SessionID's events before the first event of invocation
// BeforeInvocationID (all of them when it is empty), with their ids and
// timestamps, and the session state SessionID had at that point: its
// create-time state with the copied events' session deltas (the rule of
// Rewind). App and user state are shared as always; no temp: state is
// copied. The new session's create-time state is the forked one's, and
// its LastUpdateTime the time of its last event (its creation time when
// it has none).
//
// It is atomic (one Redis script: both sessions are the user's, in one
// slot): the copy is of one moment of SessionID, and of two concurrent
// forks to one id exactly one wins. An existing NewSessionID is
// ErrAlreadyExists, an unknown session or invocation ErrNotFound, with
// nothing written. It works when Redis no longer holds the session (read
// back from the database first), and the new session is persisted by the
// write-behind like any other. Cost: O(k) for the k events copied (plus,
// before an invocation, the undo records of the events after it, as a
// rewind's); when Redis lacks part of what the copy needs (events older
// than its cached tail, undo records that do not reach the point) the
// history is read in full, as a rewind's.
func (s *Service) Fork(ctx context.Context, req *ForkRequest) (*ForkResponse, error) {
	if req == nil {
		return nil, nilArgument("fork request")
	}
	if err := checkSession(req.AppName, req.UserID, req.SessionID); err != nil {
		return nil, err
	}
	nid := req.NewSessionID
	if nid == "" {
		nid = uuid.NewString()
	}
	if err := checkID("NewSessionID", nid, MaxIDBytes); err != nil {
		return nil, err
	}
	if req.BeforeInvocationID != "" {
		if err := checkID("BeforeInvocationID", req.BeforeInvocationID, MaxInvocationIDBytes); err != nil {
			return nil, err
		}
	}
	args := cache.ForkArgs{SessionRef: base.SessionRef{App: req.AppName, User: req.UserID, ID: req.SessionID}, NewSID: nid,
		Before: req.BeforeInvocationID, CreateTime: time.Now().Truncate(time.Microsecond).UnixMicro(), Token: uuid.NewString()}
	for attempt := 1; ; attempt++ {
		// The loader brings the session forked from (or the user's state and
		// index) back from the database when Redis lost it, and runs the
		// script again.
		err := s.loader.Run(ctx, args.SessionRef, func() error { return s.cache.Fork(ctx, args) })
		var cold *cache.ForkHistoryError
		switch {
		case err == nil:
			return s.forked(ctx, req, nid)
		case errors.Is(err, ErrAlreadyExists):
			return nil, sessionError(ErrAlreadyExists, req.AppName, req.UserID, nid)
		case errors.Is(err, cache.ErrInvocationNotFound):
			return nil, unknownInvocation(req.AppName, req.UserID, req.SessionID, req.BeforeInvocationID)
		case errors.Is(err, ErrNotFound):
			return nil, err
		case errors.As(err, &cold):
			if args.Computed, err = s.forkFromHistory(ctx, req, cold.CreateState); err != nil {
				return nil, err
			}
		case args.Computed != nil && errors.Is(err, base.ErrStaleSession) && attempt < forkAttempts:
			// The session was created again between the history read and the write.
			if args.Computed, err = s.forkFromHistory(ctx, req, ""); err != nil {
				return nil, err
			}
		default:
			return nil, fmt.Errorf("fork %s to %s: %w", base.SessionName(req.AppName, req.UserID, req.SessionID), nid, err)
		}
	}
}

// forked reads the new session as Get returns it (with the app and user
// state other sessions wrote). The session is stored: a read that fails is
// tried again until ctx ends, as Create's.
func (s *Service) forked(ctx context.Context, req *ForkRequest, nid string) (*ForkResponse, error) {
	var resp *GetResponse
	err := untilDone(ctx, func() (err error) {
		resp, err = s.Get(ctx, &GetRequest{AppName: req.AppName, UserID: req.UserID, SessionID: nid})
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("fork %s to %s: stored, but it could not be read: %w", base.SessionName(req.AppName, req.UserID, req.SessionID), nid, err)
	}
	return &ForkResponse{Session: resp.Session}, nil
}

// forkFromHistory computes a fork's copy from the full history of the
// session forked from: its events before the point, and its create-time
// state with their session deltas applied (stateBefore).
func (s *Service) forkFromHistory(ctx context.Context, req *ForkRequest, createState string) (*cache.ForkHistory, error) {
	snap, err := s.fullHistory(ctx, base.SessionRef{App: req.AppName, User: req.UserID, ID: req.SessionID})
	if err != nil {
		return nil, historyError("fork", err)
	}
	events, err := decodeEvents(snap.Events)
	if err != nil {
		return nil, fmt.Errorf("fork %s: %w", base.SessionName(req.AppName, req.UserID, req.SessionID), err)
	}
	p := len(events)
	if req.BeforeInvocationID != "" {
		if p = slices.IndexFunc(events, func(e *Event) bool { return e.InvocationID == req.BeforeInvocationID }); p < 0 {
			return nil, unknownInvocation(req.AppName, req.UserID, req.SessionID, req.BeforeInvocationID)
		}
	}
	createTime, err := s.createState(ctx, req.AppName, req.UserID, req.SessionID, createState, snap.Incarnation)
	if err != nil {
		return nil, historyError("fork", err)
	}
	then, err := stateBefore(createTime, events, p)
	if err != nil {
		return nil, fmt.Errorf("fork %s: %w", base.SessionName(req.AppName, req.UserID, req.SessionID), err)
	}
	c := &cache.ForkHistory{Incarnation: snap.Incarnation, Events: snap.Events[:p:p]}
	b, err := json.Marshal(createTime)
	if err != nil {
		return nil, fmt.Errorf("fork %s: create-time state: %w", base.SessionName(req.AppName, req.UserID, req.SessionID), err)
	}
	c.CreateState = string(b)
	for _, k := range sortedKeys(then) {
		b, err := json.Marshal(then[k])
		if err != nil {
			return nil, fmt.Errorf("fork %s: state %q: %w", base.SessionName(req.AppName, req.UserID, req.SessionID), k, err)
		}
		c.State = append(c.State, cache.Pair{Key: k, Value: string(b)})
	}
	for i := range c.Events {
		c.Events[i].ID = events[i].ID
	}
	return c, nil
}
