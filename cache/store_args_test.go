package cache

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// The arguments of append.lua, boxed by pointer, are the values of its
// header's ARGV layout.
func TestAppendCommandLayout(t *testing.T) {
	t.Parallel()
	keys, err := NewKeys("ns:", 16)
	require.NoError(t, err)
	s := NewStore(nil, Options{Keys: keys, Durable: true, Caps: StateCaps{Session: 9, User: 8, App: 7}})
	a := AppendArgs{App: "app", User: "u", SID: "s", HandleRev: 41, Incarnation: 1735787045123456, Ts: 1735787045223456,
		InvocationID: "inv", EventID: "ev", CheckID: true, EventPre: `{"t":`, EventPost: `}`,
		Delta:     StateDelta{Session: []Pair{{"k", "1"}}, User: []Pair{{"n", `"x"`}}, Temp: []Pair{{"temp:t", "true"}}, App: []Pair{{"a", "2"}}, AppJSON: `{"a":2}`, AppOrder: 7},
		Artifacts: []Pair{{"f.txt", "3"}}, Index: "c4:call"}
	k := keys.Session("app", "u", "s")
	head := []string{"8", k.Session, k.Events, k.Temp, k.User, k.UserIndex, k.Log, k.Undo, k.EventIDs}
	head = append(head, keys.Wake(), "app", "u", "s")
	tail := []string{"1735787045223456", "inv", `{"t":`, `}`, "ev", "1", "c4:call",
		"1", "k", "1", "9", "1", "n", `"x"`, "8", "1", "temp:t", "true", "3600000", "1", "f.txt", "3", `{"a":2}`, "7"}
	for _, c := range []struct {
		tweak func(*AppendArgs)
		argv  string // the first three arguments
	}{
		{func(*AppendArgs) {}, "41|1735787045123456|"},
		{func(a *AppendArgs) { a.Concurrent = true }, "41|1735787045123456|-inf"},
		{func(a *AppendArgs) { a.Concurrent, a.HandleLastTs = true, 17 }, "41|1735787045123456|(17"},
		{func(a *AppendArgs) { a.NoHandle = true }, "||"},
		{func(a *AppendArgs) { a.NoHandle, a.IfUpdateTime = true, 99 }, "=99||"},
	} {
		x := a
		c.tweak(&x)
		want := append(append(append([]string{}, head...), strings.Split(c.argv, "|")...), tail...)
		require.Equal(t, want, s.AppendCommand(x), c.argv)
	}
}

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
