package cache

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/adksession/adksession/cache/base"
)

// scriptStatusTables are the status tables of the scripts that answer
// negative statuses, by file.
var scriptStatusTables = map[string]statuses{
	"create.lua":          createStatuses,
	"append.lua":          appendStatuses,
	"get.lua":             getStatuses,
	"compacted_calls.lua": compactedCallsStatuses,
	"index_build.lua":     indexBuildStatuses,
	"rewind.lua":          rewindStatuses,
	"fork.lua":            forkStatuses,
	"app_order.lua":       appOrderStatuses,
	"app_apply.lua":       appApplyStatuses,
	"hydrate.lua":         hydrateStatuses,
	"hydrate_state.lua":   hydrateStatuses,
	"hydrate_index.lua":   hydrateStatuses,
}

// negativeReturn is a script's negative status: `return {-N`, `return -N`,
// or a reply kept to return later (`refused = {-N`).
var negativeReturn = regexp.MustCompile(`(?:return \{?|= \{)(-[0-9]+)`)

// TestStatusTables: every negative status a script returns is in its
// script's table, and every entry of a table is returned by a script that
// uses it (a status is named once, where its script's caller reads it).
func TestStatusTables(t *testing.T) {
	t.Parallel()
	files, err := filepath.Glob("../lua/*.lua")
	require.NoError(t, err)
	require.NotEmpty(t, files)
	returned := map[string][]int64{}
	for _, f := range files {
		src, err := os.ReadFile(f)
		require.NoError(t, err)
		name := filepath.Base(f)
		for _, m := range negativeReturn.FindAllSubmatch(src, -1) {
			code, err := strconv.ParseInt(string(m[1]), 10, 64)
			require.NoError(t, err)
			table, ok := scriptStatusTables[name]
			require.True(t, ok, "%s returns %d but has no status table (cache/status.go)", name, code)
			_, ok = table[code]
			require.True(t, ok, "%s returns %d, which its status table (cache/status.go) lacks", name, code)
			returned[name] = append(returned[name], code)
		}
	}
	// A table shared by several scripts (hydrateStatuses) holds what any of them returns.
	byTable := map[uintptr][]int64{}
	for name, table := range scriptStatusTables {
		p := reflect.ValueOf(table).Pointer()
		byTable[p] = append(byTable[p], returned[name]...)
	}
	for name, table := range scriptStatusTables {
		for code := range table {
			require.Contains(t, byTable[reflect.ValueOf(table).Pointer()], code,
				"the status table of %s has %d, which no script using it returns", name, code)
		}
	}
}

// TestStatusErrors: each status is its table's error, success is nil, a
// status a script does not answer is an error of its own, and a cap's
// error is a fresh value each time (Store.capped completes it).
func TestStatusErrors(t *testing.T) {
	t.Parallel()
	require.NoError(t, appendStatuses.err(codeOK))
	require.NoError(t, appendStatuses.err(codeCaughtUp))
	require.ErrorIs(t, appendStatuses.err(-3), base.ErrStaleSession)
	require.ErrorIs(t, createStatuses.err(-10), base.ErrAlreadyExists)
	require.ErrorIs(t, appOrderStatuses.err(-4), ErrAppNotCached)
	require.ErrorIs(t, appendStatuses.err(-4), ErrUserNotCached)
	require.ErrorIs(t, rewindStatuses.err(-6), ErrInvocationNotFound)
	require.ErrorIs(t, appApplyStatuses.err(-6), ErrAppOrderLost)
	err := getStatuses.err(-99)
	require.Error(t, err)
	require.False(t, errors.Is(err, ErrNotCached))
	a, b := appendStatuses.err(-12), appendStatuses.err(-12)
	var ca, cb *base.StateCapError
	require.ErrorAs(t, a, &ca)
	require.ErrorAs(t, b, &cb)
	require.NotSame(t, ca, cb)
	require.Equal(t, "MaxSessionStateBytes", ca.Field)
	require.NotSame(t, errSessionCap, ca)
}
