package cache

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/adksession/adksession/lua"
)

// The scripts, loaded once with SCRIPT LOAD and run with EVALSHA; go-redis
// falls back to EVAL (which loads the script again) after SCRIPT FLUSH or a
// failover to a node that never saw it.
var (
	createScript        = redis.NewScript(lua.Create)
	appendScript        = redis.NewScript(lua.Append)
	getScript           = redis.NewScript(lua.Get)
	deleteScript        = redis.NewScript(lua.Delete)
	endInvocationScript = redis.NewScript(lua.EndInvocation)
	appApplyScript      = redis.NewScript(lua.AppApply)
	rewindScript        = redis.NewScript(lua.Rewind)
	flushedScript       = redis.NewScript(lua.Flushed)
	hydrateScript       = redis.NewScript(lua.Hydrate)
	hydrateStateScript  = redis.NewScript(lua.HydrateState)
	hydrateIndexScript  = redis.NewScript(lua.HydrateIndex)
	leaseRenewScript    = redis.NewScript(lua.LeaseRenew)
	leaseReleaseScript  = redis.NewScript(lua.LeaseRelease)
)

// Script return codes shared by the session scripts (see each script's header).
const (
	codeOK         = 0
	codeCaughtUp   = 1
	codeExists     = -1
	codeNotCached  = -1
	codeDeleted    = -2
	codeStale      = -3
	codeNoUser     = -4
	codeIncomplete = -5
)

// Errors the scripts report. The service maps them to its public errors or
// to a cold load from the database.
var (
	ErrExists        = errors.New("adksession: session already exists")
	ErrNotCached     = errors.New("adksession: session not cached")
	ErrDeleted       = errors.New("adksession: session deleted")
	ErrStale         = errors.New("adksession: session handle is stale")
	ErrUserNotCached = errors.New("adksession: user state not cached")
	ErrIncomplete    = errors.New("adksession: cached session incomplete")
	ErrAppNotCached  = errors.New("adksession: app state not cached")
)

// codeError maps a script's status code to an error (nil for success).
func codeError(code int64, notCached error) error {
	switch code {
	case codeOK, codeCaughtUp:
		return nil
	case -1:
		return notCached
	case codeDeleted:
		return ErrDeleted
	case codeStale:
		return ErrStale
	case codeNoUser:
		return ErrUserNotCached
	case codeIncomplete:
		return ErrIncomplete
	}
	return errors.New("adksession: unknown script status")
}

// isNoScript tells whether err is Redis's NOSCRIPT.
func isNoScript(err error) bool {
	return err != nil && strings.HasPrefix(err.Error(), "NOSCRIPT")
}

// LoadScripts loads every script (on every master of a cluster), so the first
// calls need no EVAL fallback.
func LoadScripts(ctx context.Context, c redis.UniversalClient) error {
	for _, s := range []*redis.Script{createScript, appendScript, getScript, deleteScript, endInvocationScript, appApplyScript, rewindScript,
		flushedScript, hydrateScript, hydrateStateScript, hydrateIndexScript, leaseRenewScript, leaseReleaseScript,
		pruneFenceScript, pruneUnfenceScript, pruneUserScript, pruneAppScript, deadLetterScript} {
		if err := s.Load(ctx, c).Err(); err != nil {
			return err
		}
	}
	return nil
}

// ErrNotReplicated: a write was applied on the master but fewer replicas
// than Options.WaitReplicas confirmed it in time; it is not acknowledged
// (it may survive, or be lost in a failover).
var ErrNotReplicated = errors.New("adksession: write not confirmed by enough replicas")

// maxRedirects bounds how often write follows a slot that moved (go-redis's
// default for the commands it routes itself).
const maxRedirects = 3

// masterFor returns the node serving key: the Redis itself when standalone,
// else the cluster master of key's slot. With movedTo (the address of a MOVED
// reply) it has the cluster state reloaded and waits, within ctx and a
// second, until the state names movedTo: write pins the node itself (WAIT
// must follow the script on its connection), so go-redis's redirect
// handling, which would refresh the state, never sees the MOVED.
func (s *Store) masterFor(ctx context.Context, key, movedTo string) (redis.Cmdable, error) {
	cc, ok := s.rdb.(*redis.ClusterClient)
	if !ok {
		return s.rdb, nil
	}
	deadline := time.Now().Add(time.Second)
	for {
		c, err := cc.MasterForKey(ctx, key)
		if err != nil {
			return nil, err
		}
		if movedTo == "" || c.Options().Addr == movedTo || time.Now().After(deadline) {
			return c, nil
		}
		cc.ReloadState(ctx)
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// write runs a script that changes data. With WaitReplicas it sends WAIT in
// the same round trip, on the master that ran the script.
func (s *Store) write(ctx context.Context, sc *redis.Script, keys []string, args ...any) *redis.Cmd {
	if s.waitReplicas <= 0 {
		return sc.Run(ctx, s.rdb, keys, args...)
	}
	node, err := s.masterFor(ctx, keys[0], "")
	if err != nil {
		cmd := redis.NewCmd(ctx)
		cmd.SetErr(err)
		return cmd
	}
	for attempt, redirects := 0, 0; ; attempt++ {
		pipe := node.Pipeline()
		var cmd *redis.Cmd
		if attempt == 0 {
			cmd = sc.EvalSha(ctx, pipe, keys, args...)
		} else {
			cmd = sc.Eval(ctx, pipe, keys, args...)
		}
		wait := pipe.Do(ctx, "wait", s.waitReplicas, s.waitTimeout.Milliseconds())
		_, _ = pipe.Exec(ctx)
		if attempt == 0 && isNoScript(cmd.Err()) {
			continue
		}
		if addr, moved := redis.IsMovedError(cmd.Err()); moved && redirects < maxRedirects {
			// The slot has a new master (a failover): this node ran nothing.
			redirects++
			if node, err = s.masterFor(ctx, keys[0], addr); err != nil {
				cmd.SetErr(err)
				return cmd
			}
			continue
		}
		if cmd.Err() == nil {
			if err := wait.Err(); err != nil {
				cmd.SetErr(fmt.Errorf("%w: %v", ErrNotReplicated, err))
			} else if n, _ := wait.Int64(); n < int64(s.waitReplicas) {
				cmd.SetErr(fmt.Errorf("%w: %d of %d replicas in %s", ErrNotReplicated, n, s.waitReplicas, s.waitTimeout))
			}
		}
		return cmd
	}
}
