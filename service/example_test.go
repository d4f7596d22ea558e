package service_test

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/alicebob/miniredis/v2"

	"github.com/adksession/adksession/service"
)

// A runner's loop: create a session, append the events of a turn with
// their state deltas, and read back a window of recent events with the full
// state.
func Example() {
	ctx := context.Background()
	url := os.Getenv("ADKSESSION_TEST_REDIS_URL")
	if url == "" {
		// No Redis at hand: an in-process one (as `adksession serve` embeds).
		mr := miniredis.NewMiniRedis()
		if err := mr.Start(); err != nil {
			panic(err)
		}
		defer mr.Close()
		url = "redis://" + mr.Addr() + "/0"
	}
	svc, err := service.Open(ctx, service.Config{RedisURL: url, Namespace: fmt.Sprintf("example-%d:", time.Now().UnixNano())})
	if err != nil {
		panic(err)
	}
	defer svc.Close(ctx)

	created, err := svc.Create(ctx, &service.CreateRequest{
		AppName: "travel", UserID: "ada",
		State: map[string]any{"user:language": "en", "booking_step": "start"},
	})
	if err != nil {
		panic(err)
	}
	sess := created.Session

	// One invocation: the user's message, then the agent's answer with a delta.
	for _, ev := range []*service.Event{
		{InvocationID: "inv-1", Author: "user", Content: []byte(`{"role":"user","parts":[{"text":"Book me a flight"}]}`)},
		{InvocationID: "inv-1", Author: "planner", Content: []byte(`{"role":"model","parts":[{"text":"Where to?"}]}`),
			Actions: service.EventActions{StateDelta: map[string]any{
				"booking_step":    "destination",
				"temp:scratch":    "seen by this invocation only",
				"app:bookings_on": true,
			}}},
	} {
		if err := svc.AppendEvent(ctx, sess, ev); err != nil {
			panic(err)
		}
	}
	if err := svc.EndInvocation(ctx, sess, "inv-1"); err != nil {
		panic(err)
	}

	got, err := svc.Get(ctx, &service.GetRequest{AppName: "travel", UserID: "ada", SessionID: sess.ID(), NumRecentEvents: 1})
	if err != nil {
		panic(err)
	}
	step, _ := got.Session.State().Get("booking_step")
	lang, _ := got.Session.State().Get("user:language")
	_, err = got.Session.State().Get("temp:scratch")
	fmt.Println(got.Session.Events().Len(), got.Session.Events().At(0).Author, step, lang, err != nil)
	// Output: 1 planner destination en true
}
