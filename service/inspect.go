package service

import (
	"context"
	"strings"
	"time"

	"github.com/adksession/adksession/cache/base"
)

// SessionInfo is what Inspect tells an operator about one session.
type SessionInfo struct {
	// Session is the session as Get answers it, with the request's window.
	Session *Session
	// WasCached tells whether Redis held the session before Inspect read
	// it (a session it did not hold was read from the database, and put
	// back into Redis by that read).
	WasCached bool
	// Durable tells whether a database backs Redis. Revision is the
	// session's last sequence number (its number of events), Flushed the
	// last one the database has, Pending the difference (0 without a
	// database: Redis is the only copy).
	Durable                    bool
	Revision, Flushed, Pending int64
	// CachedEvents are the events Redis holds, from sequence number
	// FirstCached on; older ones are read from the database.
	CachedEvents, FirstCached int64
	// Shard is the session's shard; its change log holds ShardBacklog
	// entries, the oldest ShardLag old; its dead-letter list
	// ShardDeadLetters.
	Shard            int
	ShardBacklog     int64
	ShardLag         time.Duration
	ShardDeadLetters int64
	// RedisBytes is MEMORY USAGE of each of the session's keys Redis
	// holds, by kind (session, events, event ids, undo, temp, user, user
	// index, app; the last three are shared with the user's or app's other
	// sessions), RedisTotal their sum.
	RedisBytes map[string]int64
	RedisTotal int64
	// StateKeys counts the session's state keys by scope: app, user,
	// session and, with GetRequest.InvocationID, temp.
	StateKeys map[string]int
}

// Inspect reads a session (as Get, with req's window) and what Redis holds
// of it: flush status, its shard's backlog, lag and dead letters, the
// memory of its keys, its state keys per scope. For operators
// (`adksession inspect`); it costs a Get and one pipeline of reads.
func (s *Service) Inspect(ctx context.Context, req *GetRequest) (*SessionInfo, error) {
	if req == nil {
		return nil, nilArgument("inspect request")
	}
	if err := checkSession(req.AppName, req.UserID, req.SessionID); err != nil {
		return nil, err
	}
	ref := base.SessionRef{App: req.AppName, User: req.UserID, ID: req.SessionID}
	before, err := s.cache.Inspect(ctx, ref)
	if err != nil {
		return nil, err
	}
	resp, err := s.Get(ctx, req)
	if err != nil {
		return nil, err
	}
	st := before
	if !before.Cached {
		if st, err = s.cache.Inspect(ctx, ref); err != nil {
			return nil, err
		}
	}
	info := &SessionInfo{Session: resp.Session, WasCached: before.Cached, Durable: s.loader.Durable(), Revision: st.Rev, Flushed: st.Flushed,
		CachedEvents: st.CachedEvents, FirstCached: st.FirstCached, Shard: st.Shard, ShardBacklog: st.ShardBacklog,
		ShardDeadLetters: st.ShardDeadLetters, RedisBytes: st.Memory, StateKeys: map[string]int{"app": 0, "user": 0, "session": 0, "temp": 0}}
	if info.Durable {
		info.Pending = st.Rev - st.Flushed
	}
	if !st.ShardOldest.IsZero() {
		info.ShardLag = max(0, time.Since(st.ShardOldest))
	}
	for _, n := range st.Memory {
		info.RedisTotal += n
	}
	for k := range resp.Session.State().All() {
		switch {
		case strings.HasPrefix(k, AppPrefix):
			info.StateKeys["app"]++
		case strings.HasPrefix(k, UserPrefix):
			info.StateKeys["user"]++
		case strings.HasPrefix(k, TempPrefix):
			info.StateKeys["temp"]++
		default:
			info.StateKeys["session"]++
		}
	}
	return info, nil
}
