package cache

import (
	"context"
	"slices"

	"github.com/redis/go-redis/v9"
)

// pipelined runs script n times in one pipeline, with the keys and
// arguments args(i) gives, and returns the replies in order. It uses
// EVALSHA, and EVAL for every call again when Redis lost the script (the
// prune's scripts are idempotent).
func (s *Store) pipelined(ctx context.Context, x *script, n int, args func(i int) ([]string, []any)) ([]*redis.Cmd, error) {
	if n == 0 {
		return nil, nil
	}
	script := s.pick(x)
	run := func(eval bool) ([]*redis.Cmd, error) {
		pipe := s.rdb.Pipeline()
		cmds := make([]*redis.Cmd, n)
		for i := range n {
			keys, argv := args(i)
			if eval {
				cmds[i] = script.Eval(ctx, pipe, keys, argv...)
			} else {
				cmds[i] = script.EvalSha(ctx, pipe, keys, argv...)
			}
		}
		_, err := pipe.Exec(ctx)
		for _, c := range cmds {
			fullError(c)
		}
		return cmds, err
	}
	cmds, err := run(false)
	if err != nil && slices.ContainsFunc(cmds, func(c *redis.Cmd) bool { return isNoScript(c.Err()) }) {
		cmds, err = run(true)
	}
	return cmds, err
}

// flags reads replies that are 0 or 1.
func flags(cmds []*redis.Cmd) ([]bool, error) {
	out := make([]bool, len(cmds))
	for i, c := range cmds {
		n, err := c.Int64()
		if err != nil {
			return nil, err
		}
		out[i] = n == 1
	}
	return out, nil
}
