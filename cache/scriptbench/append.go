package scriptbench

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/adksession/adksession/cache"
	"github.com/adksession/adksession/lua"
)

// AppendCeiling is lua.Append changed so that any number of calls with the
// same arguments append: the handle is never behind (its revision is not
// compared) and the event id is made unique per call (the given id and the
// number of the session's event ids, which every call that gets past the
// id's ZADD NX grows, whole or cut short after it). It does the same Redis
// work as an append, for measuring the ceiling (redis-benchmark EVALSHA)
// benchmarks compare against. It panics when append.lua no longer has a
// line it changes.
func AppendCeiling() string {
	s := lua.Append
	for _, r := range ceilingEdits {
		if strings.Count(s, r[0]) != 1 {
			panic("lua/append.lua no longer has `" + r[0] + "`: update scriptbench.AppendCeiling")
		}
		s = strings.Replace(s, r[0], r[1], 1)
	}
	return s
}

// ceilingEdits are AppendCeiling's replacements: a line of append.lua and
// what it becomes.
var ceilingEdits = [][2]string{
	{"    behind, ahead = hrev ~= rev, hrev > rev", "    behind, ahead = false, false"},
	{"local id = ARGV[12]", "local id = ARGV[12] .. '/' .. redis.call('ZCARD', KEYS[8])"},
}

// AppendCommand is the EVALSHA of append.lua (after "EVALSHA <sha>": the
// number of keys, the keys, the arguments) that a cache.Store made with o
// sends for a, for redis-benchmark to repeat. It is the command
// cache.Store.Append builds, taken from a client that connects to nothing:
// its hook keeps the first command and fails it.
func AppendCommand(o cache.Options, a cache.AppendArgs) ([]string, error) {
	var c capture
	rdb := redis.NewClient(&redis.Options{Addr: "capture.invalid:6379", MaxRetries: -1})
	defer rdb.Close()
	rdb.AddHook(&c)
	if _, err := cache.NewStore(rdb, o).Append(context.Background(), a); !errors.Is(err, errCaptured) {
		return nil, fmt.Errorf("append: no command captured (%v)", err)
	}
	out := make([]string, 0, len(c.args))
	for _, v := range c.args {
		switch v := v.(type) {
		case *string:
			out = append(out, *v)
		case *int64:
			out = append(out, strconv.FormatInt(*v, 10))
		default:
			out = append(out, fmt.Sprint(v))
		}
	}
	if len(out) < 3 || out[0] != "evalsha" {
		return nil, fmt.Errorf("append sent %q, not an EVALSHA", out)
	}
	out = out[2:]
	return out, nil
}

var errCaptured = errors.New("scriptbench: command captured, not sent")

// capture is a go-redis hook that keeps the arguments of the first command
// and fails every command without sending it.
type capture struct{ args []any }

func (c *capture) DialHook(next redis.DialHook) redis.DialHook { return next }

func (c *capture) ProcessHook(redis.ProcessHook) redis.ProcessHook {
	return func(_ context.Context, cmd redis.Cmder) error {
		if c.args == nil {
			c.args = append([]any(nil), cmd.Args()...)
		}
		cmd.SetErr(errCaptured)
		return errCaptured
	}
}

func (c *capture) ProcessPipelineHook(redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(_ context.Context, cmds []redis.Cmder) error {
		for _, cmd := range cmds {
			cmd.SetErr(errCaptured)
		}
		return errCaptured
	}
}
