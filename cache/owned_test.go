package cache

import (
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestOwnedCoversSessionKeys: Owned lists every key of one session besides
// its hash (what a prune deletes with it), so a key added to SessionKeys
// cannot be forgotten there.
func TestOwnedCoversSessionKeys(t *testing.T) {
	k, err := NewKeys("ns:", 0)
	require.NoError(t, err)
	s := k.Session("app", "user", "the-sid")
	owned := s.Owned()
	v := reflect.ValueOf(s)
	for i := range v.NumField() {
		f := v.Field(i)
		if f.Kind() != reflect.String || !strings.Contains(f.String(), "the-sid") || f.String() == s.Session {
			continue
		}
		require.True(t, slices.Contains(owned, f.String()), "SessionKeys.%s (%s) is not in Owned", v.Type().Field(i).Name, f.String())
	}
	require.NotContains(t, owned, s.Session)
}
