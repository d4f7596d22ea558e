package cache

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/adksession/adksession/cache/base"
	"github.com/adksession/adksession/lua"
)

// The scripts, loaded once with SCRIPT LOAD and run with EVALSHA; go-redis
// falls back to EVAL (which loads the script again) after SCRIPT FLUSH or a
// failover to a node that never saw it.
var (
	createScript         = newScript(lua.Create)
	appendScript         = newScript(lua.Append)
	getScript            = newScript(lua.Get)
	deleteScript         = newScript(lua.Delete)
	endInvocationScript  = newScript(lua.EndInvocation)
	appApplyScript       = newScript(lua.AppApply)
	appOrderScript       = newScript(lua.AppOrder)
	rewindScript         = newScript(lua.Rewind)
	forkScript           = newScript(lua.Fork)
	flushedScript        = newScript(lua.Flushed)
	hydrateScript        = newScript(lua.Hydrate)
	hydrateStateScript   = newScript(lua.HydrateState)
	hydrateIndexScript   = newScript(lua.HydrateIndex)
	leaseAcquireScript   = newScript(lua.LeaseAcquire)
	leaseReleaseScript   = newScript(lua.LeaseRelease)
	ackScript            = newScript(lua.Ack)
	stateDeadScript      = newScript(lua.StateDead)
	stateReadScript      = newScript(lua.StateRead)
	compactedCallsScript = newScript(lua.CompactedCalls)
	indexBuildScript     = newScript(lua.IndexBuild)

	allScripts = []*script{createScript, appendScript, getScript, deleteScript, endInvocationScript, appApplyScript, appOrderScript,
		rewindScript, forkScript, flushedScript, hydrateScript, hydrateStateScript, hydrateIndexScript, leaseAcquireScript, leaseReleaseScript,
		ackScript, stateDeadScript, stateReadScript, compactedCallsScript, indexBuildScript, pruneFenceScript, pruneUnfenceScript, pruneUserScript, pruneAppScript, deadLetterScript}
)

// script is one of the scripts of package lua. A script that declares
// flags starts with a Redis 7 shebang line ("#!lua flags=allow-oom"); bare is
// the same script with that line turned into a comment, for servers that
// cannot compile it (miniredis, Redis before 7): they run it without the
// flags. LoadScripts picks the form a Store uses; line numbers are the same
// in both.
type script struct {
	full, bare *redis.Script
	// The same as the committer sends them (see evalForm).
	fullForm, bareForm evalForm
}

func newScript(src string) *script {
	sc := &script{full: redis.NewScript(src), fullForm: evalForm{src: src}}
	sc.bare, sc.bareForm = sc.full, sc.fullForm
	if strings.HasPrefix(src, "#!") {
		sc.bareForm.src = "--" + src[2:]
		sc.bare = redis.NewScript(sc.bareForm.src)
	}
	sc.fullForm.sha, sc.bareForm.sha = sc.full.Hash(), sc.bare.Hash()
	return sc
}

// pick returns the form of sc this store runs.
func (s *Store) pick(sc *script) *redis.Script {
	if s.bare.Load() {
		return sc.bare
	}
	return sc.full
}

// pickForm is pick for the committer.
func (s *Store) pickForm(sc *script) *evalForm {
	if s.bare.Load() {
		return &sc.bareForm
	}
	return &sc.fullForm
}

// evalForm is a script as the committer sends it: EVALSHA with its SHA1,
// EVAL with its source when a node does not know it (after SCRIPT FLUSH, or
// on a node that never saw it).
type evalForm struct{ sha, src string }

// The command names, for command lines that point at them.
var (
	evalshaName = "evalsha"
	evalName    = "eval"
)

// evalLine is the command line of a script call with room for its head:
// EVALSHA, the SHA1 (set by command), the number of keys, the keys, the
// arguments. The names, the SHA1 and the keys go in by pointer, where
// go-redis's Eval boxes every key in an interface of its own (an allocation
// each); one allocation in all.
func evalLine(keys []string, args []any) []any {
	return append(evalHead(keys, len(args)), args...)
}

// evalHead is an evalLine without its arguments yet, with room for n.
func evalHead(keys []string, n int) []any {
	line := make([]any, 3+len(keys), 3+len(keys)+n)
	line[2] = len(keys)
	for i := range keys {
		line[3+i] = &keys[i]
	}
	return line
}

// command makes the EVALSHA command of a script call from its evalLine
// (EVAL when noScript: the node did not know the SHA1), writing the head of
// line in place: a call sent again after a NOSCRIPT reuses its line. It
// makes one allocation, the command.
func (f *evalForm) command(ctx context.Context, line []any, noScript bool) *redis.Cmd {
	line[0], line[1] = &evalshaName, &f.sha
	if noScript {
		line[0], line[1] = &evalName, &f.src
	}
	cmd := redis.NewCmd(ctx, line...)
	if line[2].(int) > 0 {
		cmd.SetFirstKeyPos(3)
	}
	return cmd
}

// run runs a script (EVALSHA, falling back to EVAL).
func (s *Store) run(ctx context.Context, sc *script, keys []string, args ...any) *redis.Cmd {
	return fullError(s.pick(sc).Run(ctx, s.rdb, keys, args...))
}

// isShebangRejected tells whether err is a server's refusal to compile a
// script's "#!" line.
func isShebangRejected(err error) bool {
	return err != nil && strings.Contains(err.Error(), "Error compiling script") && strings.Contains(err.Error(), "near '#'")
}

// fullError wraps Redis's OOM reply in base.ErrRedisFull.
func fullError(cmd *redis.Cmd) *redis.Cmd {
	if err := cmd.Err(); err != nil && strings.HasPrefix(err.Error(), "OOM ") {
		cmd.SetErr(fmt.Errorf("%w: %w", base.ErrRedisFull, err))
	}
	return cmd
}

// isNoScript tells whether err is Redis's NOSCRIPT.
func isNoScript(err error) bool {
	return err != nil && strings.HasPrefix(err.Error(), "NOSCRIPT")
}

// LoadScripts loads every script (on every master of a cluster), so the
// first calls need no EVAL fallback. When the server cannot compile a
// script's shebang line, the store runs every script in its bare form from
// then on.
func (s *Store) LoadScripts(ctx context.Context) error {
	for _, sc := range allScripts {
		err := s.pick(sc).Load(ctx, s.rdb).Err()
		if isShebangRejected(err) && sc.bare != sc.full && !s.bare.Load() {
			s.bare.Store(true)
			err = sc.bare.Load(ctx, s.rdb).Err()
		}
		if err != nil {
			return fmt.Errorf("load scripts: %w", err)
		}
	}
	return nil
}

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

// write runs a script that changes data, sharing round trips with
// concurrent calls (group commit, see committer). With WaitReplicas it sends
// WAIT in the same round trip, on the master that ran the script.
func (s *Store) write(ctx context.Context, x *script, keys []string, args ...any) *redis.Cmd {
	return s.writeLine(ctx, x, keys, evalLine(keys, args))
}

// writeLine is write with the call's evalLine built by the caller.
func (s *Store) writeLine(ctx context.Context, x *script, keys []string, line []any) *redis.Cmd {
	if s.waitReplicas <= 0 {
		return fullError(s.commit.run(ctx, s.pickForm(x), line))
	}
	args := line[3+len(keys):]
	sc := s.pick(x)
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
		if fullError(cmd).Err() == nil {
			if err := wait.Err(); err != nil {
				cmd.SetErr(fmt.Errorf("%w: %v", base.ErrNotReplicated, err))
			} else if n, _ := wait.Int64(); n < int64(s.waitReplicas) {
				cmd.SetErr(fmt.Errorf("%w: %d of %d replicas in %s", base.ErrNotReplicated, n, s.waitReplicas, s.waitTimeout))
			}
		}
		return cmd
	}
}
