package integration

// Bad input with the default limits, through the library and the HTTP API
// (docs/design.md, "Bad input"): each refused call leaves the namespace
// byte for byte as it was.

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/adksession/adksession/service"
	"github.com/adksession/adksession/service/httpapi"
)

// testBadInputDefaults: the size limits of a default Config (docs/design.md, "Bad input and poison").
func testBadInputDefaults(t *testing.T, url string) {
	e := newEnv(t, url, nil)
	ctx := ctxT(t)
	s := e.create("app", "u", "s", map[string]any{"a": 1})
	before := e.dumpNamespace()

	big := strings.Repeat("x", 900<<10)
	eight := func(prefix string) map[string]any {
		m := map[string]any{}
		for i := range 8 {
			m[fmt.Sprintf("%s%d", prefix, i)] = big
		}
		return m
	}
	// 8 × 900 KiB of temp: values: each under MaxStateValueBytes, the event
	// itself tiny once they are removed.
	err := e.svc.AppendEvent(ctx, s, &service.Event{Author: "a", InvocationID: "i", Actions: service.EventActions{StateDelta: eight("temp:")}})
	require.ErrorIs(t, err, service.ErrInvalidArgument)
	require.Contains(t, err.Error(), "limit 2097152 (Config.MaxWriteBytes)")
	require.Equal(t, before, e.dumpNamespace(), "temp: values beyond MaxWriteBytes write nothing")

	// 8 × 900 KiB of initial state, in each scope.
	for _, prefix := range []string{"", "user:", "app:"} {
		_, err = e.svc.Create(ctx, &service.CreateRequest{AppName: "app", UserID: "u", SessionID: "big", State: eight(prefix)})
		require.ErrorIs(t, err, service.ErrInvalidArgument, prefix)
		require.Contains(t, err.Error(), "limit 2097152 (Config.MaxWriteBytes)", prefix)
		require.Equal(t, before, e.dumpNamespace(), "%q: initial state beyond MaxWriteBytes writes nothing", prefix)
	}

	// Up to the limits is fine: 2 temp: values of 900 KiB, 1000 keys.
	two := map[string]any{"temp:a": big, "temp:b": big}
	e.append(s, &service.Event{Author: "a", InvocationID: "i", Actions: service.EventActions{StateDelta: two}})
	got := e.getInvSession(e.svc, "i")
	require.Equal(t, big, stateOf(got)["temp:b"])
	keys := map[string]any{}
	for i := range 1000 {
		keys[fmt.Sprintf("k%d", i)] = i
	}
	e.create("app", "u", "many", keys)
	require.Len(t, stateOf(e.getS("app", "u", "many")), 1000)
}

// testWindowBounds: Get's After outside the timestamp range is clamped.
func testWindowBounds(t *testing.T, url string) {
	e := newEnv(t, url, nil)
	s := e.create("app", "u", "s", nil)
	e.append(s, &service.Event{Author: "a", Timestamp: time.Date(2199, 12, 31, 23, 59, 59, 999998000, time.UTC)})
	e.append(s, &service.Event{Author: "b"}) // moved to 1µs later: the last µs of the range
	last := time.UnixMicro(service.MaxTimestampMicros - 1).UTC()
	require.Equal(t, last, eventsOf(s)[1].Timestamp)
	for _, c := range []struct {
		after time.Time
		n     int
	}{
		{time.Date(1900, 1, 1, 0, 0, 0, 0, time.UTC), 2},
		{time.Date(-20000, 1, 1, 0, 0, 0, 0, time.UTC), 2},
		{last, 1},
		{time.UnixMicro(service.MaxTimestampMicros), 0},
		{time.Date(9999, 1, 1, 0, 0, 0, 0, time.UTC), 0},
		{time.Date(300000, 1, 1, 0, 0, 0, 0, time.UTC), 0},
	} {
		got := e.get(&service.GetRequest{AppName: "app", UserID: "u", SessionID: "s", After: c.after})
		require.Equal(t, c.n, got.Events().Len(), "after %s", c.after)
	}
	// A window of more events than a script counts (2^53) is every event.
	for _, n := range []int{1, 2, 1 << 53, 1<<53 + 1, math.MaxInt64} {
		got := e.get(&service.GetRequest{AppName: "app", UserID: "u", SessionID: "s", NumRecentEvents: n})
		require.Equal(t, min(n, 2), got.Events().Len(), "NumRecentEvents %d", n)
		got = e.get(&service.GetRequest{AppName: "app", UserID: "u", SessionID: "s", NumRecentEvents: n, After: last})
		require.Equal(t, 1, got.Events().Len(), "NumRecentEvents %d after the last µs", n)
	}
}

// testBadInputHTTP: the same rules through the HTTP API; a create with a
// bad event creates nothing.
func testBadInputHTTP(t *testing.T, redisURL string) {
	e := newEnv(t, redisURL, nil)
	srv := httptest.NewServer(httpapi.New(e.svc, httpapi.Options{}))
	t.Cleanup(srv.Close)
	do := func(method, path, body string, header ...string) (int, string) {
		code, _, b := sendJSON(ctxT(t), t, method, srv.URL+path, body, header...)
		return code, string(b)
	}
	const sess = "/apps/app/users/u/sessions/s"
	code, body := do("POST", sess, `{"a":1}`)
	require.Equal(t, http.StatusOK, code, body)
	code, body = do("POST", sess+"/events", `{"author":"a","invocationId":"i1"}`)
	require.Equal(t, http.StatusOK, code, body)
	before := e.dumpNamespace()

	for _, c := range []struct{ name, method, path, body, want string }{
		{"timestamp 1e20", "POST", sess + "/events", `{"author":"a","timestamp":1e20}`, "out of range"},
		{"timestamp year 5000", "POST", sess + "/events", `{"author":"a","timestamp":95617584000}`, "event.Timestamp: 5000-01-01T00:00:00Z is outside"},
		{"timestamp 9999 in ms", "POST", sess + "/events", `{"author":"a","timestamp":253402214399000}`, "event.Timestamp: 9999-12-30T23:59:59Z is outside"},
		{"timestamp negative", "POST", sess + "/events", `{"author":"a","timestamp":-1.5}`, "event.Timestamp"},
		{"NUL in user: value", "PATCH", sess, `{"stateDelta":{"user:x":"a\u0000b"}}`, `actions.stateDelta[\"user:x\"]: contains NUL`},
		{"invalid UTF-8 content", "POST", sess + "/events", "{\"author\":\"a\",\"content\":{\"parts\":[{\"text\":\"caf\xe9\"}]}}", "not valid UTF-8"},
		{"invalid UTF-8 state", "PATCH", sess, "{\"stateDelta\":{\"k\":\"\xff\"}}", "not valid UTF-8"},
		{"surrogate content", "POST", sess + "/events", `{"author":"a","content":{"parts":[{"text":"\ud800"}]}}`, "event.content.parts[0].text: unpaired UTF-16 surrogate"},
		{"NUL function response", "POST", sess + "/events", `{"author":"a","content":{"parts":[{"functionResponse":{"response":{"r":"\u0000"}}}]}}`, "event.content.parts[0].functionResponse.response.r: contains NUL"},
		{"NUL author", "POST", sess + "/events", `{"author":"\u0000"}`, "event.author: contains NUL"},
		{"NUL in create state", "POST", "/apps/app/users/u/sessions", `{"sessionId":"n","state":{"k":["\u0000"]}}`, `State[\"k\"][0]: contains NUL`},
		{"bad event in a create", "POST", "/apps/app/users/u/sessions", `{"sessionId":"n","events":[{"author":"a"},{"author":"b","content":{"t":"\u0000"}}]}`, "event.content.t: contains NUL"},
		{"NUL invocation in get", "GET", sess + "?invocationId=%00", "", "InvocationID: contains NUL"},
		{"bad base64 inline data", "POST", sess + "/events", `{"author":"a","content":{"parts":[{"inlineData":{"mimeType":"image/png","data":"!!!notbase64"}}]}}`, "event.content.parts[0].inlineData.data: not base64"},
		{"bad base64 thought signature", "POST", sess + "/events", `{"author":"a","content":{"parts":[{"text":"x","thoughtSignature":"%%%"}]}}`, "event.content.parts[0].thoughtSignature: not base64"},
		{"bad base64 in storage form", "POST", sess + "/events", `{"author":"a","invocation_id":"i","content":{"parts":[{"text":"x","thought_signature":"AB"}]}}`, "event.content.parts[0].thoughtSignature: not base64"},
		{"bad base64 function response part", "POST", sess + "/events", `{"author":"a","content":{"parts":[{"functionResponse":{"name":"f","parts":[{"inlineData":{"data":"A"}}]}}]}}`, "event.content.parts[0].functionResponse.parts[0].inlineData.data: not base64"},
		{"bad base64 compacted content", "POST", sess + "/events", `{"author":"a","actions":{"compaction":{"compactedContent":{"parts":[{"thoughtSignature":"a\nb"}]}}}}`, "event.actions.compaction.compactedContent.parts[0].thoughtSignature: not base64"},
		{"bad base64 sdk blob", "POST", sess + "/events", `{"author":"a","groundingMetadata":{"searchEntryPoint":{"sdkBlob":"_+"}}}`, "event.groundingMetadata.searchEntryPoint.sdkBlob: not base64"},
		{"bad base64 inline data in a create", "POST", "/apps/app/users/u/sessions", `{"sessionId":"n","events":[{"author":"a"},{"author":"b","content":{"parts":[{"inlineData":{"data":"!!!notbase64"}}]}}]}`, "events[1]: adksession: invalid argument: event.content.parts[0].inlineData.data: not base64"},
		{"bad base64 thought signature in a create", "POST", "/apps/app/users/u/sessions", `{"sessionId":"n","events":[{"author":"b","content":{"parts":[{"text":"x","thoughtSignature":"%%%"}]}}]}`, "event.content.parts[0].thoughtSignature: not base64"},
		{"bad base64 sdk blob in a create", "POST", "/apps/app/users/u/sessions", `{"sessionId":"n","events":[{"author":"b","groundingMetadata":{"searchEntryPoint":{"sdkBlob":"A"}}}]}`, "event.groundingMetadata.searchEntryPoint.sdkBlob: not base64"},
		{"negative window", "GET", sess + "?numRecentEvents=-1", "", `numRecentEvents: \"-1\" is not a non-negative integer`},
		{"window beyond int64", "GET", sess + "?numRecentEvents=99999999999999999999", "", `numRecentEvents: \"99999999999999999999\" is beyond a 64-bit integer`},
		{"page size beyond the limit", "GET", "/apps/app/users/u/sessions?pageSize=100000000000000000", "", "PageSize: 100000000000000000, limit 10000"},
		{"negative page size", "GET", "/apps/app/users/u/sessions?pageSize=-5", "", "pageSize"},
		{"search page size beyond the limit", "GET", "/api/sessions?app=app&pageSize=100000000000000000", "", "PageSize: 100000000000000000, limit 10000"},
		{"dead letters beyond the limit", "GET", "/api/deadletters?limit=100000000000000000", "", "limit 100000000000000000: must be in [1,"},
		{"lastUpdateTime 1e20", "POST", sess + "/events?lastUpdateTime=1e20", `{"author":"a"}`, "IfLastUpdate: 2286-11-20T17:46:40Z is no session's update time"},
		{"artifact version beyond 2^53", "POST", sess + "/events", `{"author":"a","actions":{"artifactDelta":{"f":9007199254740993}}}`, "event.actions.artifactDelta.f: version 9007199254740993"},
		{"artifact version below -1", "POST", sess + "/events", `{"author":"a","actions":{"artifactDelta":{"f":-2}}}`, "event.actions.artifactDelta.f: version -2"},
	} {
		code, body := do(c.method, c.path, c.body)
		require.Equal(t, http.StatusBadRequest, code, "%s: %s", c.name, body)
		require.Contains(t, body, c.want, c.name)
		require.Equal(t, before, e.dumpNamespace(), "%s: bad input writes nothing", c.name)
	}

	// A create with events is all or nothing: one id for two different
	// events creates nothing (it was 409 with the session left holding the
	// first, and every retry 409), the same event twice is stored once.
	const sessions = "/apps/app/users/u/sessions"
	code, body = do("POST", sessions, `{"sessionId":"d","events":[{"id":"e1","author":"a"},{"id":"e2","author":"a"},{"id":"e1","author":"b"}]}`)
	require.Equal(t, http.StatusBadRequest, code, body)
	require.Contains(t, body, `events[2]: id \"e1\" is also events[0]'s, a different event`)
	require.Equal(t, before, e.dumpNamespace(), "a create with one id for two events writes nothing")
	code, body = do("GET", sessions+"/d", "")
	require.Equal(t, http.StatusNotFound, code, body)
	code, body = do("POST", sessions, `{"sessionId":"d","events":[{"id":"e1","author":"a","timestamp":5},{"id":"e1","author":"a","timestamp":6},{"id":"e2","author":"b"}]}`)
	require.Equal(t, http.StatusOK, code, body)
	var created struct {
		Events []struct{ ID, Author string }
	}
	require.NoError(t, json.Unmarshal([]byte(body), &created))
	require.Equal(t, []struct{ ID, Author string }{{"e1", "a"}, {"e2", "b"}}, created.Events)
	code, body = do("DELETE", sessions+"/d", "")
	require.Equal(t, http.StatusNoContent, code, body)
	before = e.dumpNamespace()

	for _, etag := range []string{`"9007199254740992"`, `"9223372036854775807"`, `"-1"`} {
		code, body := do("POST", sess+"/events", `{"author":"a"}`, "If-Match", etag)
		require.Equal(t, http.StatusBadRequest, code, "If-Match %s: %s", etag, body)
		require.Contains(t, body, "is no session's update time", etag)
		require.Equal(t, before, e.dumpNamespace(), "If-Match %s: bad input writes nothing", etag)
	}

	// A window beyond 2^53 events is every event.
	for _, n := range []string{"100000000000000000", "9223372036854775807", "9007199254740993"} {
		code, body := do("GET", sess+"?numRecentEvents="+n, "")
		require.Equal(t, http.StatusOK, code, body)
		var got struct{ Events []json.RawMessage }
		require.NoError(t, json.Unmarshal([]byte(body), &got))
		require.Len(t, got.Events, 1, "numRecentEvents=%s", n)
	}

	// afterTimestamp beyond the range: no event (not all of them).
	for after, n := range map[string]int{"1e20": 0, "9e15": 0, "0.000001": 1} {
		code, body := do("GET", sess+"?afterTimestamp="+url.QueryEscape(after), "")
		require.Equal(t, http.StatusOK, code, body)
		var got struct{ Events []json.RawMessage }
		require.NoError(t, json.NewDecoder(bytes.NewBufferString(body)).Decode(&got))
		require.Len(t, got.Events, n, "afterTimestamp=%s", after)
	}
}
