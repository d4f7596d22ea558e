package cache_test

import (
	"hash/fnv"
	"net/url"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/adksession/adksession/cache"
)

func TestKeys(t *testing.T) {
	t.Parallel()
	k, err := cache.NewKeys("ns:", 0)
	require.NoError(t, err)
	require.Equal(t, cache.DefaultShards, k.Shards())
	require.Equal(t, 7, k.Shard("app", "user"))
	require.Equal(t, 22, k.Shard("my:app", "u {1}"))

	s := k.Session("app", "user", "sid")
	for _, c := range []struct{ name, got, want string }{
		{"Session", s.Session, "ns:adk:{7}:s:app:user:sid"},
		{"Events", s.Events, "ns:adk:{7}:e:app:user:sid"},
		{"Temp", s.Temp, "ns:adk:{7}:t:app:user:sid"},
		{"Undo", s.Undo, "ns:adk:{7}:r:app:user:sid"},
		{"EventIDs", s.EventIDs, "ns:adk:{7}:i:app:user:sid"},
		{"User", s.User, "ns:adk:{7}:u:app:user"},
		{"UserIndex", s.UserIndex, "ns:adk:{7}:us:app:user"},
		{"AppIndex", s.AppIndex, "ns:adk:{7}:as:app"},
		{"Log", s.Log, "ns:adk:{7}:log"},
		{"App.State", k.App("app").State, "ns:adk:{a:app}:a"},
		{"App.Applied", k.App("app").Applied, "ns:adk:{a:app}:ap"},
		{"ShardKeys.Log", k.ShardKeys(7).Log, "ns:adk:{7}:log"},
		{"ShardKeys.Lease", k.ShardKeys(7).Lease, "ns:adk:{7}:lease"},
		{"Meta", k.Meta(), "ns:adk:meta"},
		{"Stats", k.Stats(), "ns:adk:stats"},
		{"AppIndexMember", cache.AppIndexMember("user", "sid"), "user\x00sid"},
		{"AppIndex of a shard", k.AppIndex(7, "app"), "ns:adk:{7}:as:app"},
	} {
		require.Equal(t, c.want, c.got, c.name)
	}
	require.Equal(t, 7, s.Shard)

	// Ids with separators and braces are escaped; the hash tag stays the shard's.
	s = k.Session("my:app", "u {1}", "a}b\n%")
	require.Equal(t, "ns:adk:{22}:s:my%3Aapp:u%20%7B1%7D:a%7Db%0A%25", s.Session)
	require.Equal(t, "ns:adk:{22}:u:my%3Aapp:u%20%7B1%7D", s.User)
	require.Equal(t, "ns:adk:{22}:as:my%3Aapp", s.AppIndex)
	require.Equal(t, "ns:adk:{a:my%3Aapp}:a", k.App("my:app").State)
	require.Equal(t, "u {1}\x00a}b\n%", cache.AppIndexMember("u {1}", "a}b\n%"))

	// No namespace; another shard count.
	k8, err := cache.NewKeys("", 8)
	require.NoError(t, err)
	require.Equal(t, 8, k8.Shards())
	require.Equal(t, "adk:{7}:s:app:user:sid", k8.Session("app", "user", "sid").Session)
	require.Equal(t, "adk:meta", k8.Meta())

	for _, ns := range []string{"a{", "}", "x{y}:"} {
		_, err := cache.NewKeys(ns, 0)
		require.Error(t, err, "namespace %q", ns)
	}
}

// Every key of one session carries the same hash tag, and it is the only
// brace pair of the key.
func TestSessionKeysShareHashTag(t *testing.T) {
	t.Parallel()
	k, err := cache.NewKeys("ns:", 0)
	require.NoError(t, err)
	for _, id := range [][3]string{{"a", "b", "c"}, {"{x}", "}y{", "{}"}, {"a:b", "c", "d"}, {"", "", ""}} {
		s := k.Session(id[0], id[1], id[2])
		want := hashTag(s.Session)
		for _, key := range []string{s.Events, s.Temp, s.Undo, s.EventIDs, s.User, s.UserIndex, s.AppIndex, s.Log} {
			require.Equal(t, want, hashTag(key), key)
			require.Equal(t, 1, strings.Count(key, "{"), key)
			require.Equal(t, 1, strings.Count(key, "}"), key)
		}
		a := k.App(id[0])
		require.Equal(t, hashTag(a.State), hashTag(a.Applied))
		require.Equal(t, hashTag(a.State), hashTag(a.Order))
		require.Equal(t, "a:"+cache.Escape(id[0]), hashTag(a.State))
	}
}

// A session's keys are built in one allocation (every append builds them):
// the builder's size is exact, whatever the lengths of the ids.
func TestSessionKeysOneAllocation(t *testing.T) {
	k, err := cache.NewKeys("bench-namespace:", 0)
	require.NoError(t, err)
	for _, id := range [][3]string{{"a", "b", "c"}, {"app", "user-1234", "3fa85f64-5717-4562-b3fc-2c963f66afa6"},
		{strings.Repeat("app-", 40), strings.Repeat("user-", 30), "s"}, {strings.Repeat("long app ", 20), "u:{x}", ""}} {
		var s cache.SessionKeys
		allocs := testing.AllocsPerRun(100, func() { s = k.Session(id[0], id[1], id[2]) })
		escaped := strings.ContainsAny(strings.Join(id[:], ""), " :{}")
		require.LessOrEqual(t, allocs, map[bool]float64{false: 1, true: 4}[escaped], "%q", id) // Escape allocates once per escaped id
		require.Equal(t, k.Session(id[0], id[1], id[2]), s)
	}
}

// hashTag is what Redis Cluster hashes: between the first '{' and the next '}'.
func hashTag(key string) string {
	i := strings.IndexByte(key, '{')
	if i < 0 {
		return key
	}
	j := strings.IndexByte(key[i+1:], '}')
	if j <= 0 {
		return key
	}
	return key[i+1 : i+1+j]
}

func TestEscape(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ in, want string }{
		{"", ""},
		{"plain-id_1.2/x", "plain-id_1.2/x"},
		{"a:b", "a%3Ab"},
		{"{x}", "%7Bx%7D"},
		{"100%", "100%25"},
		{"a b", "a%20b"},
		{"a\nb\tc\r", "a%0Ab%09c%0D"},
		{"\x00\x01\x7f", "%00%01%7F"},
		{"ü✓", "ü✓"},
		{"\xff", "\xff"},
		{"%3A", "%253A"},
	} {
		require.Equal(t, c.want, cache.Escape(c.in), "Escape(%q)", c.in)
		back, err := cache.Unescape(c.want)
		require.NoError(t, err)
		require.Equal(t, c.in, back, "Unescape(%q)", c.want)
	}
}

func TestEscapeRoundTripAndInjective(t *testing.T) {
	t.Parallel()
	// Every string over an alphabet of the troublesome bytes, up to length 3,
	// plus some longer ones: Escape is undone by Unescape (and by a URL
	// decoder), never yields a separator or brace, and no two inputs share
	// an output.
	alphabet := []string{"a", ":", "{", "}", "%", " ", "\n", "\x00", "3", "A", "/", "ü"}
	inputs := []string{""}
	frontier := []string{""}
	for range 3 {
		var next []string
		for _, p := range frontier {
			for _, c := range alphabet {
				next = append(next, p+c)
			}
		}
		inputs = append(inputs, next...)
		frontier = next
	}
	inputs = append(inputs, "%%3A%3a", "a:b:c", "{a:b}:{c}", strings.Repeat("%:", 64))
	seen := make(map[string]string, len(inputs))
	for _, in := range inputs {
		out := cache.Escape(in)
		require.NotContains(t, out, ":", "Escape(%q)", in)
		require.NotContains(t, out, "{", "Escape(%q)", in)
		require.NotContains(t, out, "}", "Escape(%q)", in)
		for i := 0; i < len(out); i++ {
			require.Greater(t, out[i], byte(' '), "Escape(%q) = %q", in, out)
		}
		if prev, dup := seen[out]; dup && prev != in {
			t.Fatalf("Escape(%q) = Escape(%q) = %q", prev, in, out)
		}
		seen[out] = in
		back, err := cache.Unescape(out)
		require.NoError(t, err)
		require.Equal(t, in, back)
		dec, err := url.PathUnescape(out)
		require.NoError(t, err)
		require.Equal(t, in, dec, "a URL decoder undoes Escape(%q)", in)
	}
}

func TestUnescapeRejectsMalformed(t *testing.T) {
	t.Parallel()
	for _, in := range []string{"%", "%4", "a%zz", "%G0", "x%"} {
		_, err := cache.Unescape(in)
		require.Error(t, err, "Unescape(%q)", in)
	}
}

// appIndexOrder checks that app index members order as the (user, sid)
// pairs they name, and that they parse back.
func appIndexOrder(t *testing.T, u1, s1, u2, s2 string) {
	m1, m2 := cache.AppIndexMember(u1, s1), cache.AppIndexMember(u2, s2)
	want := strings.Compare(u1, u2)
	if want == 0 {
		want = strings.Compare(s1, s2)
	}
	require.Equal(t, want, strings.Compare(m1, m2), "(%q, %q) vs (%q, %q)", u1, s1, u2, s2)
	u, s, err := cache.ParseAppIndexMember(m1)
	require.NoError(t, err)
	require.Equal(t, [2]string{u1, s1}, [2]string{u, s})
}

func TestAppIndexMemberOrder(t *testing.T) {
	t.Parallel()
	ids := []string{"a", "a!", "a:", "a:b", "ab", "b", "A", "é", "a b", "%", "{x}", "~"}
	for _, u1 := range ids {
		for _, s1 := range ids {
			for _, u2 := range ids {
				for _, s2 := range ids {
					appIndexOrder(t, u1, s1, u2, s2)
				}
			}
		}
	}
	_, _, err := cache.ParseAppIndexMember("no separator")
	require.Error(t, err)
}

// FuzzAppIndexMember: for ids without NUL (the service refuses NUL in ids),
// member order is (user, sid) order and members parse back.
func FuzzAppIndexMember(f *testing.F) {
	f.Add("a", "b", "a!", "c")
	f.Add("u", "s:1", "u:", "s")
	f.Add("", "x", "x", "")
	f.Fuzz(func(t *testing.T, u1, s1, u2, s2 string) {
		for _, id := range []string{u1, s1, u2, s2} {
			if strings.IndexByte(id, 0) >= 0 {
				t.Skip("ids never contain NUL")
			}
		}
		appIndexOrder(t, u1, s1, u2, s2)
	})
}

// Shard is FNV-1a (hash/fnv) of app, NUL, user, modulo the shard count.
func TestShardIsFNV1a(t *testing.T) {
	t.Parallel()
	k, err := cache.NewKeys("", 1000)
	require.NoError(t, err)
	for _, c := range [][2]string{{"", ""}, {"app", "user"}, {"my:app", "u {1}"}, {"é😀", "\x00\xff"}, {strings.Repeat("a", 300), "b"}} {
		h := fnv.New32a()
		h.Write([]byte(c[0] + "\x00" + c[1]))
		require.Equal(t, int(h.Sum32()%1000), k.Shard(c[0], c[1]), "%q", c)
	}
}
