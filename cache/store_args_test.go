package cache

import (
	"context"
	"fmt"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"
)

// The committer's command line is EVALSHA <sha> <numkeys> <keys> <args>
// (EVAL <source> ... once a node did not know the script), routed by its
// first key, built in two allocations (the line and the command) whatever
// the number of keys.
func TestEvalCommand(t *testing.T) {
	sc := newScript("#!lua flags=allow-oom\nreturn 1")
	f := &sc.fullForm
	keys := []string{"{a}:k1", "{a}:k2"}
	n := int64(7)
	args := []any{"x", &n}
	str := func(v any) string {
		switch v := v.(type) {
		case *string:
			return *v
		case *int64:
			return strconv.FormatInt(*v, 10)
		}
		return fmt.Sprint(v)
	}
	line := func(noScript bool) []string {
		var out []string
		for _, v := range f.command(context.Background(), evalLine(keys, args), noScript).Args() {
			out = append(out, str(v))
		}
		return out
	}
	require.Equal(t, []string{"evalsha", sc.full.Hash(), "2", "{a}:k1", "{a}:k2", "x", "7"}, line(false))
	require.Equal(t, []string{"eval", "#!lua flags=allow-oom\nreturn 1", "2", "{a}:k1", "{a}:k2", "x", "7"}, line(true))
	require.Equal(t, "--lua flags=allow-oom\nreturn 1", sc.bareForm.src)
	require.Equal(t, sc.bare.Hash(), sc.bareForm.sha)
	// A call sent again after NOSCRIPT reuses its line: EVAL, then EVALSHA again.
	reused := evalLine(keys, args)
	require.Equal(t, "eval", str(f.command(context.Background(), reused, true).Args()[0]))
	require.Equal(t, sc.full.Hash(), str(f.command(context.Background(), reused, false).Args()[1]))
	allocs := testing.AllocsPerRun(100, func() { _ = f.command(context.Background(), evalLine(keys, args), false) })
	require.LessOrEqual(t, allocs, 2.0)
}
