package integration

// The eviction policy check of Open (docs/operations.md, "Redis settings"): with a database
// behind Redis, an allkeys-* policy could evict unflushed writes, so Open
// refuses it (on every cluster master) unless Config.AllowAllKeysEviction.

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/adksession/adksession/integration/testenv"
	"github.com/adksession/adksession/service"
)

// lockedBuffer is a log sink safe for the service's goroutines.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// openWith opens a service on redisURL (and db) and returns its error and
// what it logged.
func openWith(t *testing.T, redisURL, db string, allow bool) (error, string) {
	t.Helper()
	ctx := context.Background()
	var log lockedBuffer
	svc, err := service.Open(ctx, service.Config{RedisURL: redisURL, DatabaseURL: db, Namespace: testenv.UniqueName(t, "ev") + ":",
		AllowAllKeysEviction: allow, DisableFlusher: true, Logger: slog.New(slog.NewTextHandler(&log, nil))})
	if err == nil {
		require.NoError(t, svc.Close(ctx))
	}
	return err, log.String()
}

func TestEvictionPolicy(t *testing.T) {
	t.Parallel()
	db := testenv.FreshDatabase(t)
	require.NoError(t, service.Migrate(context.Background(), db))
	for _, c := range []struct {
		name    string
		args    []string
		noDB    bool
		acl     bool // connect as a user who may not run CONFIG nor INFO
		allow   bool
		refused bool
		warning string
	}{
		{name: "noeviction", args: []string{"--maxmemory-policy", "noeviction"}},
		{name: "volatile-lru", args: []string{"--maxmemory-policy", "volatile-lru"}},
		{name: "volatile-ttl", args: []string{"--maxmemory-policy", "volatile-ttl"}},
		{name: "allkeys-lru", args: []string{"--maxmemory-policy", "allkeys-lru"}, refused: true},
		{name: "allkeys-lfu", args: []string{"--maxmemory-policy", "allkeys-lfu"}, refused: true},
		{name: "allkeys-random", args: []string{"--maxmemory-policy", "allkeys-random"}, refused: true},
		{name: "allkeys-lru allowed", args: []string{"--maxmemory-policy", "allkeys-lru"}, allow: true},
		{name: "allkeys-lru without a database", args: []string{"--maxmemory-policy", "allkeys-lru"}, noDB: true},
		// CONFIG disabled (as on managed Redis): INFO memory tells the policy.
		{name: "CONFIG disabled, allkeys-lru", args: []string{"--maxmemory-policy", "allkeys-lru", "--rename-command", "CONFIG", ""}, refused: true},
		{name: "CONFIG disabled, volatile-lru", args: []string{"--maxmemory-policy", "volatile-lru", "--rename-command", "CONFIG", ""}},
		// Neither CONFIG nor INFO allowed: accepted with a warning.
		{name: "policy unknown", args: []string{"--maxmemory-policy", "allkeys-lru"}, acl: true,
			warning: "cannot read the Redis eviction policy"},
	} {
		t.Run(strings.ReplaceAll(c.name, " ", "_"), func(t *testing.T) {
			t.Parallel()
			srv := testenv.StartRedis(t, c.args...)
			url := srv.URL
			if c.acl {
				_, err := testenv.RespDo(srv.Addr, "ACL", "SETUSER", "app", "on", ">pw", "~*", "&*", "+@all", "-config", "-info")
				require.NoError(t, err)
				url = "redis://app:pw@" + srv.Addr + "/0"
			}
			dbURL := db
			if c.noDB {
				dbURL = ""
			}
			err, log := openWith(t, url, dbURL, c.allow)
			if c.refused {
				require.True(t, errors.Is(err, service.ErrEvictionPolicy), "Open: %v", err)
				require.ErrorContains(t, err, srv.Addr)
				require.ErrorContains(t, err, strings.Fields(c.name)[len(strings.Fields(c.name))-1])
				return
			}
			require.NoError(t, err)
			// The subtests share one database in their own namespaces: Open
			// warns about those (TestSharedDatabaseWarns); nothing else.
			var others []string
			for _, line := range strings.Split(strings.TrimSpace(log), "\n") {
				if line != "" && !strings.Contains(line, "the database also serves other namespaces") {
					others = append(others, line)
				}
			}
			log = strings.Join(others, "\n")
			if c.warning == "" {
				require.Empty(t, log)
			} else {
				require.Contains(t, log, c.warning)
				require.Contains(t, log, srv.Addr)
			}
		})
	}
}

// TestEvictionPolicyCluster: every master is checked; one allkeys-* master
// is enough to refuse.
func TestEvictionPolicyCluster(t *testing.T) {
	t.Parallel()
	db := testenv.FreshDatabase(t)
	require.NoError(t, service.Migrate(context.Background(), db))
	cl := testenv.StartCluster(t, "--maxmemory-policy", "volatile-lru")
	err, log := openWith(t, cl.URL, db, false)
	require.NoError(t, err)
	require.Empty(t, log)

	var masters []string
	for _, n := range cl.Nodes {
		info, err := testenv.RespDo(n.Addr, "INFO", "replication")
		require.NoError(t, err)
		if testenv.InfoField(info, "role") == "master" {
			masters = append(masters, n.Addr)
		}
	}
	require.Len(t, masters, 3)
	for _, m := range masters {
		_, err := testenv.RespDo(m, "CONFIG", "SET", "maxmemory-policy", "allkeys-lfu")
		require.NoError(t, err)
		err, _ = openWith(t, cl.URL, db, false)
		require.True(t, errors.Is(err, service.ErrEvictionPolicy), "Open with master %s on allkeys-lfu: %v", m, err)
		require.ErrorContains(t, err, m)
		err, _ = openWith(t, cl.URL, db, true)
		require.NoError(t, err, "allowed")
		_, err = testenv.RespDo(m, "CONFIG", "SET", "maxmemory-policy", "volatile-lru")
		require.NoError(t, err)
	}
}
