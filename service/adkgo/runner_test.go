package adkgo

import (
	"errors"
	"fmt"
	"iter"
	"testing"

	"github.com/stretchr/testify/require"
	"google.golang.org/adk/v2/agent"
	"google.golang.org/adk/v2/runner"
	"google.golang.org/adk/v2/session"
	"google.golang.org/genai"

	"github.com/adksession/adksession/service"
)

// TestRunnerEndToEnd drives adk-go's real runner over adksession.
func TestRunnerEndToEnd(t *testing.T) {
	forEachBackend(t, runnerEndToEnd)
}

// runnerEndToEnd runs three turns of a model-free agent through adk-go's
// runner on one Service, then a fourth through a second runner on a fresh
// Service of the same cfg (another process, same Redis and namespace),
// which must see the whole state and history. It takes a Config so that
// the same scenario runs with a database behind Redis.
func runnerEndToEnd(t *testing.T, cfg service.Config) {
	ctx := t.Context()
	const app, user = "counter-app", "u1"
	first := New(openService(t, cfg))
	created, err := first.Create(ctx, &session.CreateRequest{AppName: app, UserID: user,
		State: map[string]any{"user:name": "ada", "count": 0}})
	require.NoError(t, err)
	sid := created.Session.ID()

	turn := func(svc session.Service, n int) []string {
		r, err := runner.New(runner.Config{AppName: app, Agent: counterAgent(t), SessionService: svc})
		require.NoError(t, err)
		var texts []string
		for ev, err := range r.Run(ctx, user, sid, genai.NewContentFromText(fmt.Sprintf("hello %d", n), genai.RoleUser), agent.RunConfig{}) {
			require.NoError(t, err)
			require.NotEmpty(t, ev.ID)
			texts = append(texts, ev.Content.Parts[0].Text)
		}
		return texts
	}
	for n := 1; n <= 3; n++ {
		require.Equal(t, []string{
			fmt.Sprintf("turn %d for ada", n),
			fmt.Sprintf("count=%d scratch=turn-%d", n, n),
		}, turn(first, n))
	}

	second := New(openService(t, cfg))
	require.Equal(t, []string{"turn 4 for ada", "count=4 scratch=turn-4"}, turn(second, 4))

	for _, svc := range []session.Service{first, second} {
		got, err := svc.Get(ctx, &session.GetRequest{AppName: app, UserID: user, SessionID: sid})
		require.NoError(t, err)
		require.Equal(t, map[string]any{
			"count": 4.0, "user:name": "ada", "user:visits": 4.0, "app:runs": 4.0,
			"last_message": "hello 4", "seen_scratch": "turn-4",
		}, stateOf(got.Session), "no temp: key is stored")

		var history []string
		for ev := range got.Session.Events().All() {
			history = append(history, ev.Author+": "+ev.Content.Parts[0].Text)
			require.NotContains(t, ev.Actions.StateDelta, "temp:scratch")
		}
		var want []string
		for n := 1; n <= 4; n++ {
			want = append(want, fmt.Sprintf("user: hello %d", n), fmt.Sprintf("counter: turn %d for ada", n),
				fmt.Sprintf("counter: count=%d scratch=turn-%d", n, n))
		}
		require.Equal(t, want, history)

		// The user's state is shared with a new session; the session's is not.
		other, err := svc.Create(ctx, &session.CreateRequest{AppName: app, UserID: user})
		require.NoError(t, err)
		require.Equal(t, map[string]any{"user:name": "ada", "user:visits": 4.0, "app:runs": 4.0}, stateOf(other.Session))
	}
}

// counterAgent is an agent without a model. Each turn it reads the state
// through its context, yields an event that sets session, user:, app: and
// temp: keys, then reads them back (temp: included) after the runner has
// appended that event, and yields a second event saying what it saw.
func counterAgent(t *testing.T) agent.Agent {
	a, err := agent.New(agent.Config{
		Name: "counter",
		Run: func(ctx agent.InvocationContext) iter.Seq2[*session.Event, error] {
			return func(yield func(*session.Event, error) bool) {
				st := ctx.Session().State()
				if _, err := st.Get("temp:scratch"); !errors.Is(err, session.ErrStateKeyNotExist) {
					yield(nil, fmt.Errorf("temp:scratch of the previous turn is visible: %v", err))
					return
				}
				count, visits, runs := number(st, "count"), number(st, "user:visits"), number(st, "app:runs")
				name, err := st.Get("user:name")
				if err != nil {
					yield(nil, err)
					return
				}
				turn := int(count) + 1
				ev := session.NewEvent(ctx, ctx.InvocationID())
				ev.Content = genai.NewContentFromText(fmt.Sprintf("turn %d for %v", turn, name), genai.RoleModel)
				ev.Actions.StateDelta = map[string]any{
					"count": count + 1, "user:visits": visits + 1, "app:runs": runs + 1,
					"temp:scratch": fmt.Sprintf("turn-%d", turn), "last_message": ctx.UserContent().Parts[0].Text,
				}
				if !yield(ev, nil) {
					return
				}

				scratch, err := st.Get("temp:scratch")
				if err != nil {
					yield(nil, fmt.Errorf("temp:scratch after the append: %w", err))
					return
				}
				ev2 := session.NewEvent(ctx, ctx.InvocationID())
				ev2.Content = genai.NewContentFromText(fmt.Sprintf("count=%v scratch=%v", number(st, "count"), scratch), genai.RoleModel)
				ev2.Actions.StateDelta["seen_scratch"] = scratch
				yield(ev2, nil)
			}
		},
	})
	require.NoError(t, err)
	return a
}

// number reads a numeric state value; absent is 0.
func number(st session.State, key string) float64 {
	v, err := st.Get(key)
	if err != nil {
		return 0
	}
	switch n := v.(type) {
	case float64:
		return n
	case int:
		return float64(n)
	}
	return -1
}
