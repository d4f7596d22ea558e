package adkgo

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/adk/v2/model"
	"google.golang.org/adk/v2/session"
	"google.golang.org/genai"

	"github.com/adksession/adksession/integration/testenv"
	"github.com/adksession/adksession/service"
)

// forEachBackend runs test on standalone Redis and on the cluster, with a
// Config of a fresh namespace.
func forEachBackend(t *testing.T, test func(t *testing.T, cfg service.Config)) {
	testenv.EachRedis(t, func(t *testing.T, url string) {
		test(t, service.Config{RedisURL: url, Namespace: testenv.UniqueName(t, "adkgo-")})
	})
}

func TestAppendEventStoresEveryField(t *testing.T) {
	forEachBackend(t, func(t *testing.T, cfg service.Config) {
		ctx := t.Context()
		s := New(openService(t, cfg))
		created, err := s.Create(ctx, &session.CreateRequest{AppName: "app", UserID: "u1"})
		require.NoError(t, err)

		ev := fullEvent()
		ev.Partial = false // partial events are not stored
		ev.ID, ev.Timestamp = "", time.Time{}
		before := time.Now().Truncate(time.Microsecond)
		require.NoError(t, s.AppendEvent(ctx, created.Session, ev))

		require.Len(t, ev.ID, 36, "a UUID is written back")
		require.False(t, ev.Timestamp.Before(before), "the assigned timestamp is written back")
		require.Equal(t, ev.Timestamp, ev.Timestamp.Truncate(time.Microsecond))
		require.Equal(t, ev, created.Session.Events().At(0))

		got, err := s.Get(ctx, &session.GetRequest{AppName: "app", UserID: "u1", SessionID: created.Session.ID()})
		require.NoError(t, err)
		require.Equal(t, 1, got.Session.Events().Len())
		require.Equal(t, ev, got.Session.Events().At(0))
		require.Equal(t, ev.Timestamp, got.Session.LastUpdateTime())
	})
}

func TestAppendEventUpdatesTheHandle(t *testing.T) {
	forEachBackend(t, func(t *testing.T, cfg service.Config) {
		ctx := t.Context()
		s := New(openService(t, cfg))
		created, err := s.Create(ctx, &session.CreateRequest{AppName: "app", UserID: "u1",
			State: map[string]any{"k": "v0", "user:name": "ada", "temp:dropped": 1}})
		require.NoError(t, err)
		h := created.Session
		require.Equal(t, map[string]any{"k": "v0", "user:name": "ada"}, stateOf(h))

		ev := &session.Event{InvocationID: "inv1", Author: "agent",
			Actions: session.EventActions{StateDelta: map[string]any{"temp:t": "x", "k": "v1", "app:n": 1}}}
		require.NoError(t, s.AppendEvent(ctx, h, ev))

		// The caller's delta stays as it was; the handle has the temp: key
		// for the rest of the invocation; its event and the store do not.
		require.Equal(t, map[string]any{"temp:t": "x", "k": "v1", "app:n": 1}, ev.Actions.StateDelta)
		require.Equal(t, map[string]any{"k": "v1", "user:name": "ada", "app:n": 1.0, "temp:t": "x"}, stateOf(h))
		require.Equal(t, map[string]any{"k": "v1", "app:n": 1}, h.Events().At(0).Actions.StateDelta)
		require.Equal(t, ev.Timestamp, h.LastUpdateTime())
		require.Nil(t, h.Events().At(1))
		require.Nil(t, h.Events().At(-1))
		stored := get(t, s, h)
		require.Equal(t, map[string]any{"k": "v1", "user:name": "ada", "app:n": 1.0}, stateOf(stored))
		require.Equal(t, map[string]any{"k": "v1", "app:n": 1.0}, stored.Events().At(0).Actions.StateDelta)

		// State().Set lives in the handle until an event carries the key.
		require.NoError(t, h.State().Set("local", "set"))
		v, err := h.State().Get("local")
		require.NoError(t, err)
		require.Equal(t, "set", v)
		_, err = get(t, s, h).State().Get("local")
		require.ErrorIs(t, err, session.ErrStateKeyNotExist)
		_, err = h.State().Get("missing")
		require.ErrorIs(t, err, session.ErrStateKeyNotExist)

		ev2 := &session.Event{InvocationID: "inv2", Author: "agent",
			Actions:     session.EventActions{StateDelta: map[string]any{"local": "appended"}},
			LLMResponse: modelText("second")}
		require.NoError(t, s.AppendEvent(ctx, h, ev2))
		// A new invocation ends the previous one's temp: state.
		require.Equal(t, map[string]any{"k": "v1", "user:name": "ada", "app:n": 1.0, "local": "appended"}, stateOf(h))
		require.Equal(t, stateOf(h), stateOf(get(t, s, h)))
		require.Equal(t, []string{ev.ID, ev2.ID}, eventIDs(h))
		require.Equal(t, []string{ev.ID, ev2.ID}, eventIDs(get(t, s, h)))
	})
}

func TestAppendEventAcceptsAForeignHandle(t *testing.T) {
	forEachBackend(t, func(t *testing.T, cfg service.Config) {
		ctx := t.Context()
		s := New(openService(t, cfg))
		mem := session.InMemoryService()
		for _, svc := range []session.Service{s, mem} {
			_, err := svc.Create(ctx, &session.CreateRequest{AppName: "app", UserID: "u1", SessionID: "s1"})
			require.NoError(t, err)
		}
		foreign, err := mem.Get(ctx, &session.GetRequest{AppName: "app", UserID: "u1", SessionID: "s1"})
		require.NoError(t, err)

		ev := &session.Event{ID: "e1", InvocationID: "inv1", Author: "user", LLMResponse: modelText("hi"),
			Actions: session.EventActions{StateDelta: map[string]any{"k": "v", "temp:t": 1}}}
		require.NoError(t, s.AppendEvent(ctx, foreign.Session, ev))
		require.False(t, ev.Timestamp.IsZero())

		stored := get(t, s, foreign.Session)
		require.Equal(t, []string{"e1"}, eventIDs(stored))
		require.Equal(t, map[string]any{"k": "v"}, stateOf(stored))
		require.Equal(t, map[string]any{"k": "v", "temp:t": 1}, stateOf(foreign.Session))

		other, err := mem.Create(ctx, &session.CreateRequest{AppName: "app", UserID: "u1", SessionID: "only-in-memory"})
		require.NoError(t, err)
		err = s.AppendEvent(ctx, other.Session, &session.Event{ID: "e2", Author: "user"})
		require.ErrorIs(t, err, service.ErrNotFound)
	})
}

func TestStaleHandles(t *testing.T) {
	forEachBackend(t, func(t *testing.T, cfg service.Config) {
		ctx := t.Context()
		strict := New(openService(t, cfg))
		cfg.ConcurrentAppends = true
		concurrent := New(openService(t, cfg))
		created, err := strict.Create(ctx, &session.CreateRequest{AppName: "app", UserID: "u1"})
		require.NoError(t, err)
		h1, h2 := get(t, strict, created.Session), get(t, strict, created.Session)

		first := &session.Event{ID: "e1", InvocationID: "inv1", Author: "a", Actions: session.EventActions{StateDelta: map[string]any{"k1": "v1"}}}
		require.NoError(t, strict.AppendEvent(ctx, h1, first))
		err = strict.AppendEvent(ctx, h2, &session.Event{ID: "e2", InvocationID: "inv2", Author: "a"})
		require.ErrorIs(t, err, service.ErrStaleSession)
		require.Equal(t, []string{"e1"}, eventIDs(get(t, strict, created.Session)))
		require.Zero(t, h2.Events().Len())

		// With ConcurrentAppends the stale handle catches up: it gets the
		// event it missed, in order, and the state it carried.
		h3 := get(t, concurrent, created.Session)
		require.NoError(t, concurrent.AppendEvent(ctx, h1, &session.Event{ID: "e2", InvocationID: "inv2", Author: "a"}))
		second := &session.Event{ID: "e3", InvocationID: "inv3", Author: "a", Actions: session.EventActions{StateDelta: map[string]any{"k3": "v3"}}}
		require.NoError(t, concurrent.AppendEvent(ctx, h3, second))
		require.Equal(t, []string{"e1", "e2", "e3"}, eventIDs(h3))
		require.Equal(t, map[string]any{"k1": "v1", "k3": "v3"}, stateOf(h3))
		require.Equal(t, []string{"e1", "e2", "e3"}, eventIDs(get(t, concurrent, created.Session)))
	})
}

func TestListReadsEveryPage(t *testing.T) {
	forEachBackend(t, func(t *testing.T, cfg service.Config) {
		ctx := t.Context()
		s := &sessionService{svc: openService(t, cfg), pageSize: 2}
		want := map[string][]string{}
		for i, user := range []string{"u1", "u1", "u1", "u1", "u1", "u2", "u2"} {
			c, err := s.Create(ctx, &session.CreateRequest{AppName: "app", UserID: user, State: map[string]any{"user:name": user, "i": i}})
			require.NoError(t, err)
			require.NoError(t, s.AppendEvent(ctx, c.Session, &session.Event{ID: "e", InvocationID: "inv", Author: "user"}))
			want[user] = append(want[user], c.Session.ID())
			want[""] = append(want[""], c.Session.ID())
		}
		for _, user := range []string{"u1", "u2", "", "nobody"} {
			got, err := s.List(ctx, &session.ListRequest{AppName: "app", UserID: user})
			require.NoError(t, err)
			var ids []string
			for _, sess := range got.Sessions {
				ids = append(ids, sess.ID())
				require.Zero(t, sess.Events().Len(), "List returns no events")
				require.Equal(t, sess.UserID(), stateOf(sess)["user:name"])
			}
			require.ElementsMatch(t, want[user], ids, "user %q", user)
		}
	})
}

func TestErrorsWrapTheSentinels(t *testing.T) {
	forEachBackend(t, func(t *testing.T, cfg service.Config) {
		ctx := t.Context()
		s := New(openService(t, cfg))
		_, err := s.Create(ctx, &session.CreateRequest{AppName: "app", UserID: "u1", SessionID: "s1"})
		require.NoError(t, err)
		_, err = s.Create(ctx, &session.CreateRequest{AppName: "app", UserID: "u1", SessionID: "s1"})
		require.ErrorIs(t, err, service.ErrAlreadyExists)
		_, err = s.Get(ctx, &session.GetRequest{AppName: "app", UserID: "u2", SessionID: "s1"})
		require.ErrorIs(t, err, service.ErrNotFound)
		_, err = s.Create(ctx, &session.CreateRequest{UserID: "u1"})
		require.ErrorIs(t, err, service.ErrInvalidArgument)
		require.ErrorIs(t, s.AppendEvent(ctx, nil, &session.Event{}), service.ErrInvalidArgument)
	})
}

func get(t *testing.T, s session.Service, sess session.Session) session.Session {
	t.Helper()
	resp, err := s.Get(t.Context(), &session.GetRequest{AppName: sess.AppName(), UserID: sess.UserID(), SessionID: sess.ID()})
	require.NoError(t, err)
	return resp.Session
}

func stateOf(s session.Session) map[string]any {
	m := map[string]any{}
	for k, v := range s.State().All() {
		m[k] = v
	}
	return m
}

func eventIDs(s session.Session) []string {
	var ids []string
	for e := range s.Events().All() {
		ids = append(ids, e.ID)
	}
	return ids
}

func modelText(text string) model.LLMResponse {
	return model.LLMResponse{Content: genai.NewContentFromText(text, genai.RoleModel)}
}

// TestBytesEveryAlphabet: bytes appended in either base64 alphabet, padded
// or not, through the library and over the storage form, read back through
// the adapter as the same bytes; bad base64 is refused before it could
// make the session unreadable (service.ValidateEvent).
func TestBytesEveryAlphabet(t *testing.T) {
	forEachBackend(t, func(t *testing.T, cfg service.Config) {
		ctx := t.Context()
		svc := openService(t, cfg)
		s := New(svc)
		created, err := s.Create(ctx, &session.CreateRequest{AppName: "app", UserID: "u"})
		require.NoError(t, err)
		key := service.AppendToRequest{AppName: "app", UserID: "u", SessionID: created.Session.ID()}
		appendRaw := func(js string) error {
			var ev service.Event
			require.NoError(t, ev.UnmarshalJSON([]byte(js)))
			req := key
			req.Event = &ev
			return svc.AppendTo(ctx, &req)
		}
		// API form: URL-safe unpadded, standard unpadded, one '='; storage form (snake_case).
		require.NoError(t, appendRaw(`{"author":"a","content":{"role":"model","parts":[{"inlineData":{"mimeType":"b","data":"-_-_AA"},"thoughtSignature":"AQI"},`+
			`{"functionResponse":{"name":"f","response":{},"parts":[{"inlineData":{"mimeType":"b","data":"+/+/AA"}}]}}]},`+
			`"groundingMetadata":{"searchEntryPoint":{"sdkBlob":"_w="}}}`))
		require.NoError(t, appendRaw(`{"author":"a","invocation_id":"i","content":{"role":"model","parts":[{"inline_data":{"mime_type":"b","data":"_w"},"thought_signature":"AQI="}]}}`))
		for _, bad := range []string{`"!!!notbase64"`, `"%%%"`, `"AB"`, `"A-_/"`} {
			err := appendRaw(`{"author":"a","content":{"parts":[{"text":"x","thoughtSignature":` + bad + `}]}}`)
			require.ErrorIs(t, err, service.ErrInvalidArgument, bad)
		}

		got := get(t, s, created.Session)
		require.Equal(t, 2, got.Events().Len())
		e1, e2 := got.Events().At(0), got.Events().At(1)
		require.Equal(t, []byte{0xfb, 0xff, 0xbf, 0}, e1.Content.Parts[0].InlineData.Data)
		require.Equal(t, []byte{1, 2}, e1.Content.Parts[0].ThoughtSignature)
		require.Equal(t, []byte{0xfb, 0xff, 0xbf, 0}, e1.Content.Parts[1].FunctionResponse.Parts[0].InlineData.Data)
		require.Equal(t, []byte{0xff}, e1.GroundingMetadata.SearchEntryPoint.SDKBlob)
		require.Equal(t, []byte{0xff}, e2.Content.Parts[0].InlineData.Data)
		require.Equal(t, []byte{1, 2}, e2.Content.Parts[0].ThoughtSignature)
	})
}
