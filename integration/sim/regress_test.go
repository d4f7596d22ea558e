package sim

// Regular tests of what the simulation found: each reproduces one failure in
// a few deterministic steps, on the shared servers.

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/adksession/adksession/cache"
	"github.com/adksession/adksession/integration/testenv"
	"github.com/adksession/adksession/service"
)

// small is a Service on the shared Redis (a namespace of its own) and a fresh
// database, with the simulation's configuration and a flusher of its own.
type small struct {
	t   *testing.T
	svc *service.Service
	rdb redis.UniversalClient
	ns  string
}

func newSmall(t *testing.T, tweak func(*service.Config)) *small {
	t.Helper()
	ctx := context.Background()
	db := testenv.FreshDatabase(t)
	require.NoError(t, service.Migrate(ctx, db))
	cfg := simConfig(testenv.RedisURL(t), db)
	cfg.Namespace = testenv.UniqueName(t, "sim-") + ":"
	cfg.DisableFlusher = false
	if tweak != nil {
		tweak(&cfg)
	}
	svc, err := service.Open(ctx, cfg)
	require.NoError(t, err)
	rdb, err := cache.NewClient(testenv.RedisURL(t))
	require.NoError(t, err)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		svc.Close(ctx)
		rdb.Close()
	})
	return &small{t: t, svc: svc, rdb: rdb, ns: cfg.Namespace}
}

func (s *small) flush() {
	s.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	require.NoError(s.t, s.svc.Flush(ctx))
}

// wipe deletes every key of the namespace: a FLUSHALL of this deployment.
func (s *small) wipe() {
	s.t.Helper()
	ctx := context.Background()
	keys, err := s.rdb.Keys(ctx, s.ns+"*").Result()
	require.NoError(s.t, err)
	require.NotEmpty(s.t, keys)
	require.NoError(s.t, s.rdb.Del(ctx, keys...).Err())
}

// TestRetryAfterCacheLoss: a duplicate delivery (the same event, same id) of
// an event Redis holds only as read back from the database is acknowledged
// with the stored timestamp. Found by the simulation (a retry after FLUSHALL
// answered ErrAlreadyExists): the event read back has its content's object
// keys in jsonb's order and its bytes in the URL-safe alphabet, and the
// comparison took that for another event. Both paths: the session put back
// into Redis (cache loss) and an event older than the cached tail (looked up
// in the database).
func TestRetryAfterCacheLoss(t *testing.T) {
	t.Parallel()
	contents := map[string]string{
		"key order": `{"role":"model","parts":[{"functionCall":{"name":"f","args":{"b":1,"a":2},"id":"x"}}]}`,
		"bytes":     `{"role":"user","parts":[{"inlineData":{"mimeType":"application/octet-stream","data":"Ynl0ZXMgOTI2IAD/+w=="}}]}`,
	}
	for name, content := range contents {
		for _, path := range []string{"cache loss", "older than the cache"} {
			t.Run(name+"/"+path, func(t *testing.T) {
				t.Parallel()
				s := newSmall(t, nil)
				ctx := context.Background()
				resp, err := s.svc.Create(ctx, &service.CreateRequest{AppName: "a", UserID: "u", SessionID: "s"})
				require.NoError(t, err)
				sess := resp.Session
				ev := &service.Event{ID: "e1", InvocationID: "i", Author: "model", Content: json.RawMessage(content),
					Actions: service.EventActions{StateDelta: map[string]any{"k": 1}}}
				sent := ev.Clone()
				require.NoError(t, s.svc.AppendEvent(ctx, sess, ev))
				if path == "older than the cache" {
					for i := range 8 { // MaxCachedEvents is 6: e1 is trimmed from Redis once flushed
						require.NoError(t, s.svc.AppendEvent(ctx, sess, &service.Event{InvocationID: "i", Author: "model",
							Content: json.RawMessage(fmt.Sprintf(`{"parts":[{"text":"%d"}]}`, i))}))
					}
				}
				s.flush()
				if path == "cache loss" {
					s.wipe()
				}
				again := sent.Clone()
				require.NoError(t, s.svc.AppendEvent(ctx, sess, again), "the same event delivered again")
				require.Equal(t, ev.Timestamp, again.Timestamp, "acknowledged with the stored timestamp")
				other := sent.Clone()
				other.Content = json.RawMessage(`{"parts":[{"text":"another"}]}`)
				require.ErrorIs(t, s.svc.AppendEvent(ctx, sess, other), service.ErrAlreadyExists)
				got, err := s.svc.Get(ctx, &service.GetRequest{AppName: "a", UserID: "u", SessionID: "s"})
				require.NoError(t, err)
				n := 0
				for e := range got.Session.Events().All() {
					if e.ID == "e1" {
						n++
					}
				}
				require.Equal(t, 1, n, "e1 stored once")
			})
		}
	}
}
