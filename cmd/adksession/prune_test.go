package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/adksession/adksession/integration/testenv"
	"github.com/adksession/adksession/service"
)

// TestPrune runs `adksession prune` on a real Redis and a SQLite file: a
// dry run (--json) counts and changes nothing, the prune deletes the idle
// sessions only, draws its progress bar and prints its summary.
func TestPrune(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	redisURL, dbURL := testenv.RedisURL(t), "sqlite://"+filepath.Join(t.TempDir(), "prune.db")
	ns := testenv.UniqueName(t, "cmd-prune-") + ":"
	require.NoError(t, service.Migrate(ctx, dbURL))
	svc, err := service.Open(ctx, service.Config{RedisURL: redisURL, DatabaseURL: dbURL, Namespace: ns})
	require.NoError(t, err)
	defer svc.Close(ctx)
	old := time.Now().Add(-100 * 24 * time.Hour)
	for i, sid := range []string{"old-1", "old-2", "old-3", "new"} {
		resp, err := svc.Create(ctx, &service.CreateRequest{AppName: "shop", UserID: fmt.Sprint("u", i%2), SessionID: sid})
		require.NoError(t, err)
		ts := time.Time{}
		if sid != "new" {
			ts = old.Add(time.Duration(i) * time.Minute)
		}
		for range 2 {
			require.NoError(t, svc.AppendEvent(ctx, resp.Session, &service.Event{Author: "user", InvocationID: "i", Timestamp: ts,
				Content: json.RawMessage(`{"parts":[{"text":"hello"}]}`)}))
			if !ts.IsZero() {
				ts = ts.Add(time.Second)
			}
		}
	}
	require.NoError(t, svc.Flush(ctx))
	args := []string{"--redis", redisURL, "--database", dbURL, "--namespace", ns, "--idle-for", "720h", "--batch", "2"}

	var out, errs bytes.Buffer
	require.NoError(t, runPrune(ctx, append(args, "--dry-run", "--json"), &out, &errs))
	var dry pruneJSON
	require.NoError(t, json.Unmarshal(out.Bytes(), &dry), out.String())
	require.Equal(t, [4]int64{3, 6, 1, 0}, [4]int64{dry.Sessions, dry.Events, dry.UserStates, dry.Kept},
		"dry run: sessions, events, user states (u0's: u1 keeps a session), kept")
	require.True(t, dry.DryRun)
	list, err := svc.List(ctx, &service.ListRequest{AppName: "shop"})
	require.NoError(t, err)
	require.Len(t, list.Sessions, 4, "after a dry run")

	out.Reset()
	errs.Reset()
	require.NoError(t, runPrune(ctx, args, &out, &errs))
	require.Contains(t, errs.String(), "pruned [")
	require.Contains(t, errs.String(), "100% 3/3")
	require.Contains(t, out.String(), "pruned 3 sessions, 6 events")
	require.Contains(t, out.String(), "2 batches")
	list, err = svc.List(ctx, &service.ListRequest{AppName: "shop"})
	require.NoError(t, err)
	require.Len(t, list.Sessions, 1)
	require.Equal(t, "new", list.Sessions[0].ID())

	out.Reset()
	require.ErrorIs(t, runPrune(ctx, []string{"--redis", redisURL, "--database", dbURL}, &out, &errs), errUsage)
}
