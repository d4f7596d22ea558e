package adkgo

import (
	"testing"

	"github.com/stretchr/testify/require"
	"google.golang.org/adk/v2/session"

	"github.com/adksession/adksession/service"
)

// TestAppendEventNamesTheEventInPlace: an event appended without an ID
// gets its ID in the caller's *session.Event, the one the store holds,
// whichever way AppendEvent goes: through a handle of this package, a
// stale one brought up to date (Config.ConcurrentAppends), or a handle of
// another session.Service. A compaction record (adk-go 2.3 on) names the
// events it leaves out, so an event must be nameable right after its append.
func TestAppendEventNamesTheEventInPlace(t *testing.T) {
	forEachBackend(t, func(t *testing.T, cfg service.Config) {
		ctx := t.Context()
		cfg.ConcurrentAppends = true
		s := New(openService(t, cfg))
		created, err := s.Create(ctx, &session.CreateRequest{AppName: "app", UserID: "u1", SessionID: "s1"})
		require.NoError(t, err)
		h := created.Session
		stale := get(t, s, h)
		mem := session.InMemoryService()
		_, err = mem.Create(ctx, &session.CreateRequest{AppName: "app", UserID: "u1", SessionID: "s1"})
		require.NoError(t, err)
		foreign, err := mem.Get(ctx, &session.GetRequest{AppName: "app", UserID: "u1", SessionID: "s1"})
		require.NoError(t, err)

		var ids []string
		for _, through := range []session.Session{h, stale, foreign.Session} {
			ev := &session.Event{InvocationID: "inv", Author: "agent", LLMResponse: modelText("hi")}
			require.NoError(t, s.AppendEvent(ctx, through, ev))
			require.Len(t, ev.ID, 36, "a %T handle: the caller's event has its UUID", through)
			ids = append(ids, ev.ID)
		}
		require.Equal(t, ids, eventIDs(get(t, s, h)), "the ids the callers got are the stored ones")
		require.Equal(t, ids[:2], eventIDs(stale), "the stale handle caught up, with the ids")
		require.Equal(t, ids[:1], eventIDs(h))
	})
}

// TestEventsIsASnapshot: a value Events() returned does not change when
// events are appended through the handle afterwards, in either append
// path (the handle's list extended, or rebuilt when it caught up with
// appends made elsewhere).
func TestEventsIsASnapshot(t *testing.T) {
	forEachBackend(t, func(t *testing.T, cfg service.Config) {
		ctx := t.Context()
		cfg.ConcurrentAppends = true
		s := New(openService(t, cfg))
		created, err := s.Create(ctx, &session.CreateRequest{AppName: "app", UserID: "u1"})
		require.NoError(t, err)
		h := created.Session
		first := &session.Event{ID: "e1", InvocationID: "inv", Author: "agent", LLMResponse: modelText("one")}
		require.NoError(t, s.AppendEvent(ctx, h, first))

		before := h.Events()
		require.NoError(t, s.AppendEvent(ctx, h, &session.Event{ID: "e2", InvocationID: "inv", Author: "agent"}))
		other := get(t, s, h)
		require.NoError(t, s.AppendEvent(ctx, other, &session.Event{ID: "e3", InvocationID: "inv", Author: "agent"}))
		middle := h.Events()
		require.NoError(t, s.AppendEvent(ctx, h, &session.Event{ID: "e4", InvocationID: "inv", Author: "agent"}))

		require.Equal(t, 1, before.Len())
		require.Equal(t, "e1", before.At(0).ID)
		require.Nil(t, before.At(1))
		var seen []string
		for e := range before.All() {
			seen = append(seen, e.ID)
		}
		require.Equal(t, []string{"e1"}, seen)
		require.Equal(t, "one", before.At(0).Content.Parts[0].Text)
		require.Equal(t, 2, middle.Len(), "e2 only: e3 was appended through another handle")
		require.Equal(t, []string{"e1", "e2", "e3", "e4"}, eventIDs(h), "the handle caught up (rebuilt)")
		require.Equal(t, "e2", middle.At(1).ID)
		require.Nil(t, middle.At(2))
	})
}
