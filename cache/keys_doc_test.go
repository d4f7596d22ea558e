package cache

import (
	"os"
	"reflect"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// layoutTable renders layout as the markdown table of docs/redis-keys.md.
func layoutTable() string {
	var b strings.Builder
	b.WriteString("| pattern | type | TTL | writer | reader |\n|---|---|---|---|---|\n")
	for _, k := range layout {
		cells := []string{"`" + k.Pattern + "`", k.Type, k.TTL, k.Writer, k.Reader}
		for i := range cells {
			cells[i] = strings.ReplaceAll(cells[i], "|", "\\|")
		}
		b.WriteString("| " + strings.Join(cells, " | ") + " |\n")
	}
	return b.String()
}

// TestKeysDocumented keeps docs/redis-keys.md equal to layout. With
// ADKSESSION_UPDATE_DOCS=1 it writes the table into the file instead.
func TestKeysDocumented(t *testing.T) {
	doc, err := os.ReadFile("../docs/redis-keys.md")
	require.NoError(t, err)
	re := regexp.MustCompile(`(?s)<!-- keys:begin -->\n(.*?)<!-- keys:end -->`)
	m := re.FindSubmatch(doc)
	require.NotNil(t, m, "docs/redis-keys.md: no <!-- keys:begin --> ... <!-- keys:end --> block")
	if os.Getenv("ADKSESSION_UPDATE_DOCS") == "1" {
		doc = re.ReplaceAll(doc, []byte("<!-- keys:begin -->\n"+strings.ReplaceAll(layoutTable(), "$", "$$")+"<!-- keys:end -->"))
		require.NoError(t, os.WriteFile("../docs/redis-keys.md", doc, 0o644))
		return
	}
	require.Equal(t, layoutTable(), string(m[1]), "docs/redis-keys.md disagrees with cache.layout; the table should be:\n%s", layoutTable())
}

// TestLayoutCoversBuilders checks that every key a builder makes matches a
// documented pattern, and that every documented pattern is built.
func TestLayoutCoversBuilders(t *testing.T) {
	k, err := NewKeys("<ns>", 8)
	require.NoError(t, err)
	s := k.Session("<app>", "<user>", "<sid>")
	a := k.App("<app>")
	sh := k.ShardKeys(3)
	st := k.Stage("<app>", "<user>", "<sid>")
	built := []string{k.Meta(), k.Stats(), k.Wake(), k.PruneLease()}
	for _, set := range []any{s, a, sh, st} {
		v := reflect.ValueOf(set)
		for i := range v.NumField() {
			if f := v.Field(i); f.Kind() == reflect.String {
				built = append(built, f.String())
			}
		}
	}
	patterns := map[string]bool{}
	for _, spec := range layout {
		patterns[spec.Pattern] = false
	}
	shardTag := regexp.MustCompile(`\{\d+\}`)
	for _, key := range built {
		p := shardTag.ReplaceAllString(key, "{<shard>}")
		_, ok := patterns[p]
		require.True(t, ok, "key %q (pattern %q) is not in cache.Layout / docs/redis-keys.md", key, p)
		patterns[p] = true
	}
	for p, seen := range patterns {
		require.True(t, seen, "documented pattern %q is built by no key builder", p)
	}
}
