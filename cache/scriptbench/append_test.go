package scriptbench

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/adksession/adksession/cache"
	"github.com/adksession/adksession/cache/base"
	"github.com/adksession/adksession/lua"
)

// The command AppendCommand takes from cache.Store.Append is append.lua's
// keys and its header's ARGV layout, as strings.
func TestAppendCommandLayout(t *testing.T) {
	t.Parallel()
	keys, err := cache.NewKeys("ns:", 16)
	require.NoError(t, err)
	o := cache.Options{Keys: keys, Durable: true, TempTTL: time.Hour, Caps: cache.StateCaps{Session: 9, User: 8, App: 7}}
	a := cache.AppendArgs{SessionRef: base.SessionRef{App: "app", User: "u", ID: "s"}, HandleRev: 41, Incarnation: 1735787045123456, Ts: 1735787045223456,
		InvocationID: "inv", EventID: "ev", CheckID: true, EventPre: `{"t":`, EventPost: `}`,
		Delta: cache.StateDelta{Session: []cache.Pair{{Key: "k", Value: "1"}}, User: []cache.Pair{{Key: "n", Value: `"x"`}},
			Temp: []cache.Pair{{Key: "temp:t", Value: "true"}}, App: []cache.Pair{{Key: "a", Value: "2"}}, AppJSON: `{"a":2}`, AppOrder: 7},
		Artifacts: []cache.Pair{{Key: "f.txt", Value: "3"}}, Index: "c4:call"}
	k := keys.Session("app", "u", "s")
	head := []string{"8", k.Session, k.Events, k.Temp, k.User, k.UserIndex, k.Log, k.Undo, k.EventIDs}
	head = append(head, keys.Wake(), "app", "u", "s")
	tail := []string{"1735787045223456", "inv", `{"t":`, `}`, "ev", "1", "c4:call",
		"1", "k", "1", "9", "1", "n", `"x"`, "8", "1", "temp:t", "true", "3600000", "1", "f.txt", "3", `{"a":2}`, "7"}
	for _, c := range []struct {
		tweak func(*cache.AppendArgs)
		argv  string // the first three arguments
	}{
		{func(*cache.AppendArgs) {}, "41|1735787045123456|"},
		{func(a *cache.AppendArgs) { a.Concurrent = true }, "41|1735787045123456|-inf"},
		{func(a *cache.AppendArgs) { a.Concurrent, a.HandleLastTs = true, 17 }, "41|1735787045123456|(17"},
		{func(a *cache.AppendArgs) { a.NoHandle = true }, "||"},
		{func(a *cache.AppendArgs) { a.NoHandle, a.IfUpdateTime = true, 99 }, "=99||"},
	} {
		x := a
		c.tweak(&x)
		want := append(append(append([]string{}, head...), strings.Split(c.argv, "|")...), tail...)
		got, err := AppendCommand(o, x)
		require.NoError(t, err, c.argv)
		require.Equal(t, want, got, c.argv)
	}
}

// AppendCeiling changes exactly its lines of append.lua, each once.
func TestAppendCeiling(t *testing.T) {
	t.Parallel()
	s := AppendCeiling()
	require.NotEqual(t, lua.Append, s)
	for _, r := range ceilingEdits {
		require.Equal(t, 1, strings.Count(s, r[1]), r[1])
	}
	require.Equal(t, strings.Count(lua.Append, "\n"), strings.Count(s, "\n"))
}
