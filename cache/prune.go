package cache

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/adksession/adksession/cache/base"
	"github.com/adksession/adksession/lua"
)

// The Redis side of a prune (service.Prune): fences on the sessions whose
// rows are about to be deleted, and the cached state of users and apps
// whose last session went. Each call is one pipeline of scripts, one per
// session, user or app, so a batch costs one round trip per kind.
var (
	pruneFenceScript   = newScript(lua.PruneFence)
	pruneUnfenceScript = newScript(lua.PruneUnfence)
	pruneUserScript    = newScript(lua.PruneUser)
	pruneAppScript     = newScript(lua.PruneApp)
)

// FenceRef names a session to fence, with what the database holds of it.
type FenceRef struct {
	base.SessionRef
	Incarnation, Rev int64
}

// Fence is what FenceSessions did with one session.
type Fence struct {
	Fenced bool
	Cached bool   // the session was cached (its keys are gone now)
	Kept   string // why it was not fenced: deleted, recreated, updated, unflushed, changed
}

// FenceSessions fences the sessions refs names (prune_fence.lua): a session
// is fenced unless Redis shows it updated at or after cutoff (µs), not
// fully flushed, at another incarnation or revision than the database's, or
// deleted. A fenced session's keys are gone and its hash is a tombstone
// that expires after ttl; the prune then deletes its rows, and lifts the
// fence (UnfenceSessions) from those it did not delete. With dryRun it
// only checks, and writes nothing.
func (s *Store) FenceSessions(ctx context.Context, token string, cutoff int64, ttl time.Duration, refs []FenceRef, dryRun bool) ([]Fence, error) {
	cmds, err := s.pipelined(ctx, pruneFenceScript, len(refs), func(i int) ([]string, []any) {
		r := refs[i]
		k := s.keys.Session(r.App, r.User, r.ID)
		return append([]string{k.Session, k.UserIndex, k.AppIndex}, k.Owned()...),
			[]any{cutoff, r.Incarnation, r.Rev, ttl.Milliseconds(), token, r.ID, AppIndexMember(r.User, r.ID), boolArg(dryRun)}
	})
	if err != nil {
		return nil, fmt.Errorf("fence sessions: %w", err)
	}
	out := make([]Fence, len(refs))
	for i, c := range cmds {
		v, err := c.Slice()
		if err != nil || len(v) == 0 {
			return nil, fmt.Errorf("fence %s: %v", base.SessionName(refs[i].App, refs[i].User, refs[i].ID), err)
		}
		switch code, _ := v[0].(int64); code {
		case 1, 2:
			out[i] = Fence{Fenced: true, Cached: code == 1}
		default:
			why, _ := v[len(v)-1].(string)
			out[i] = Fence{Kept: why}
		}
	}
	return out, nil
}

// UnfenceSessions lifts the fences of token from the sessions named
// (prune_unfence.lua): they are read from the database again on next use.
func (s *Store) UnfenceSessions(ctx context.Context, token string, refs []FenceRef) error {
	_, err := s.pipelined(ctx, pruneUnfenceScript, len(refs), func(i int) ([]string, []any) {
		k := s.keys.Session(refs[i].App, refs[i].User, refs[i].ID)
		return []string{k.Session, k.UserIndex}, []any{token, refs[i].ID}
	})
	if err != nil {
		return fmt.Errorf("unfence sessions: %w", err)
	}
	return nil
}

// DropUsers drops the cached state and session index of users whose last
// session and state row a prune deleted (prune_user.lua), unless Redis
// holds a session of theirs or a state revision not flushed. It reports,
// per user, whether the keys are gone.
func (s *Store) DropUsers(ctx context.Context, users []base.StateOwner) ([]bool, error) {
	cmds, err := s.pipelined(ctx, pruneUserScript, len(users), func(i int) ([]string, []any) {
		app, user := users[i].App, users[i].User
		k := s.keys.Session(app, user, "")
		return []string{k.User, k.UserIndex, k.AppIndex}, []any{user}
	})
	if err != nil {
		return nil, fmt.Errorf("drop users: %w", err)
	}
	return flags(cmds)
}

// AppIndexed reports whether any shard's app index holds a session of app:
// a create not flushed yet.
func (s *Store) AppIndexed(ctx context.Context, app string) (bool, error) {
	pipe := s.rdb.Pipeline()
	cards := make([]*redis.IntCmd, s.keys.Shards())
	for i := range cards {
		cards[i] = pipe.ZCard(ctx, s.keys.AppIndex(i, app))
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return false, fmt.Errorf("read app indexes of %s: %w", app, err)
	}
	for _, c := range cards {
		if c.Val() > 0 {
			return true, nil
		}
	}
	return false, nil
}

// DropApp drops the cached state of an app whose state row (at revision
// rev) a prune deleted (prune_app.lua), unless it holds another revision.
func (s *Store) DropApp(ctx context.Context, app string, rev int64) (bool, error) {
	k := s.keys.App(app)
	n, err := s.run(ctx, pruneAppScript, []string{k.State, k.Order}, rev).Int64()
	if err != nil {
		return false, fmt.Errorf("drop app state of %s: %w", app, err)
	}
	return n == 1, nil
}
