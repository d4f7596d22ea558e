package integration

import (
	"context"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/adksession/adksession/cache"
	"github.com/adksession/adksession/integration/testenv"
	"github.com/adksession/adksession/service"
)

// TestLayoutVersion: Open records the key layout version in <ns>adk:meta
// (and the version of a namespace written before it was recorded, 1, which
// it refuses as another version), and
// refuses a namespace that holds another version with ErrLayoutVersion
// naming both versions and the upgrade path, writing nothing
// (docs/operations.md, "Upgrading").
func TestLayoutVersion(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := testenv.RedisURL(t)
	rdb, err := cache.NewClient(url)
	require.NoError(t, err)
	defer rdb.Close()
	ns := testenv.UniqueName(t, "layout") + ":"
	keys, err := cache.NewKeys(ns, 4)
	require.NoError(t, err)
	open := func() error {
		svc, err := service.Open(ctx, service.Config{RedisURL: url, Namespace: ns, Shards: 4})
		if err == nil {
			svc.Close(ctx)
		}
		return err
	}
	want := map[string]string{"shards": "4", "layout": strconv.Itoa(cache.LayoutVersion)}

	require.NoError(t, open())
	require.Equal(t, want, rdb.HGetAll(ctx, keys.Meta()).Val(), "a new namespace records its layout")

	// A namespace written before the version was recorded: version 1, which
	// this version (2) refuses.
	require.NoError(t, rdb.HDel(ctx, keys.Meta(), "layout").Err())
	err = open()
	require.ErrorIs(t, err, service.ErrLayoutVersion)
	require.Contains(t, err.Error(), "holds key layout version 1")
	require.Equal(t, "1", rdb.HGet(ctx, keys.Meta(), "layout").Val())
	require.NoError(t, rdb.HSet(ctx, keys.Meta(), "layout", cache.LayoutVersion).Err())
	require.NoError(t, open())

	require.NoError(t, rdb.HSet(ctx, keys.Meta(), "layout", cache.LayoutVersion+1).Err())
	before := rdb.HGetAll(ctx, keys.Meta()).Val()
	err = open()
	require.ErrorIs(t, err, service.ErrLayoutVersion)
	require.Contains(t, err.Error(), "holds key layout version "+strconv.Itoa(cache.LayoutVersion+1))
	require.Contains(t, err.Error(), "reads and writes version "+strconv.Itoa(cache.LayoutVersion))
	require.Contains(t, err.Error(), "docs/operations.md")
	require.Equal(t, before, rdb.HGetAll(ctx, keys.Meta()).Val(), "nothing written")
	n, err := rdb.Keys(ctx, ns+"*").Result()
	require.NoError(t, err)
	require.Equal(t, []string{keys.Meta()}, n, "the refused process wrote no other key")
}
