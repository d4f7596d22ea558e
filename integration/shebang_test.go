package integration

// Scripts with a Redis 7 shebang (#!lua flags=allow-oom): real Redis runs
// them with their flags; a server that cannot compile the shebang line
// (miniredis, the embedded default) runs them without it, decided once per
// Store by LoadScripts.

import (
	"context"
	"crypto/sha1"
	"database/sql"
	"encoding/hex"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/stretchr/testify/require"

	"github.com/adksession/adksession/integration/testenv"
	"github.com/adksession/adksession/lua"
	"github.com/adksession/adksession/service"
)

func sha(src string) string {
	h := sha1.Sum([]byte(src))
	return hex.EncodeToString(h[:])
}

func TestScriptShebang(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, c := range []struct {
		name string
		url  func(t testing.TB) string
		full bool // the server runs the scripts as written
	}{
		{"redis", testenv.RedisURL, true},
		{"miniredis", func(t testing.TB) string { return "redis://" + miniredis.RunT(t).Addr() + "/0" }, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			s, rdb := durableStore(t, c.url(t), "sb", 0)
			loaded, err := rdb.ScriptExists(ctx, sha(lua.LeaseAcquire), sha("--"+lua.LeaseAcquire[2:])).Result()
			require.NoError(t, err)
			require.Equal(t, []bool{c.full, !c.full}, loaded, "full form loaded, bare form loaded")

			// The flusher's scripts run in the form the store picked.
			ok, err := s.AcquireLease(ctx, 3, "a", time.Minute)
			require.NoError(t, err)
			require.True(t, ok)
			ok, err = s.AcquireLease(ctx, 3, "b", time.Minute)
			require.NoError(t, err)
			require.False(t, ok, "held by a")
			require.NoError(t, s.ReleaseLease(ctx, 3, "a"))
			ok, err = s.AcquireLease(ctx, 3, "b", time.Minute)
			require.NoError(t, err)
			require.True(t, ok, "released by a")
		})
	}
}

// TestWriteBehindOnMiniredis: the embedded default (miniredis and SQLite)
// flushes through the bare scripts.
func TestWriteBehindOnMiniredis(t *testing.T) {
	t.Parallel()
	ctx := wbCtx(t)
	db := "sqlite://" + filepath.Join(t.TempDir(), "a.db")
	require.NoError(t, service.Migrate(ctx, db))
	svc, err := service.Open(ctx, service.Config{RedisURL: "redis://" + miniredis.RunT(t).Addr() + "/0", DatabaseURL: db,
		FlushInterval: 10 * time.Millisecond})
	require.NoError(t, err)
	defer svc.Close(ctx)
	resp, err := svc.Create(ctx, &service.CreateRequest{AppName: "app", UserID: "u", SessionID: "s", State: map[string]any{"c": 1}})
	require.NoError(t, err)
	for range 3 {
		require.NoError(t, svc.AppendEvent(ctx, resp.Session, &service.Event{Author: "model", Actions: service.EventActions{StateDelta: map[string]any{"user:k": 1}}}))
	}
	require.NoError(t, svc.Flush(ctx))
	conn, err := sql.Open("sqlite", strings.TrimPrefix(db, "sqlite://"))
	require.NoError(t, err)
	defer conn.Close()
	var events, users int
	require.NoError(t, conn.QueryRow(`SELECT count(*) FROM events`).Scan(&events))
	require.NoError(t, conn.QueryRow(`SELECT count(*) FROM user_states WHERE state = '{"k":1}'`).Scan(&users))
	require.Equal(t, [2]int{3, 1}, [2]int{events, users})
}
