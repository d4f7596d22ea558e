package httpapi_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/adksession/adksession/integration/testenv"
	"github.com/adksession/adksession/service"
	"github.com/adksession/adksession/service/httpapi"
)

// eachBackend runs f on real Redis and on miniredis, the embedded default of
// `adksession serve`: the whole API must work on both.
func eachBackend(t *testing.T, f func(t *testing.T, url string)) {
	testenv.EachRedis(t, f, testenv.Standalone, testenv.Embedded)
}

// apiServer is an httptest server over a fresh service namespace.
type apiServer struct {
	*httptest.Server
	svc   *service.Service
	token string
}

// newAPIServer serves a service on redisURL; configure, when given, adjusts
// its Config.
func newAPIServer(t *testing.T, redisURL string, opt httpapi.Options, configure ...func(*service.Config)) *apiServer {
	t.Helper()
	ctx := context.Background()
	cfg := service.Config{RedisURL: redisURL, Namespace: testenv.UniqueName(t, "httpapi-")}
	for _, c := range configure {
		c(&cfg)
	}
	svc, err := service.Open(ctx, cfg)
	require.NoError(t, err)
	t.Cleanup(func() { svc.Close(context.Background()) })
	h := httpapi.New(svc, opt)
	t.Cleanup(h.Close)
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return &apiServer{Server: srv, svc: svc, token: opt.AuthToken}
}

// response is an answer as read by the tests.
type response struct {
	code   int
	header http.Header
	body   []byte
}

func (r response) json(t *testing.T, v any) {
	t.Helper()
	require.NoError(t, json.Unmarshal(r.body, v), "body: %s", r.body)
}

// errorMessage is the "error" of a JSON error answer.
func (r response) errorMessage(t *testing.T) string {
	t.Helper()
	var e struct {
		Error string `json:"error"`
	}
	r.json(t, &e)
	require.NotEmpty(t, e.Error, "body: %s", r.body)
	return e.Error
}

// do sends a request; body is JSON-encoded unless it is a string or []byte,
// and sent as application/json unless header names another Content-Type.
func (s *apiServer) do(t *testing.T, method, path string, body any, header ...string) response {
	t.Helper()
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case string:
		rd = bytes.NewBufferString(b)
	case []byte:
		rd = bytes.NewReader(b)
	default:
		enc, err := json.Marshal(b)
		require.NoError(t, err)
		rd = bytes.NewReader(enc)
	}
	req, err := http.NewRequest(method, s.URL+path, rd)
	require.NoError(t, err)
	if rd != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if s.token != "" {
		req.Header.Set("Authorization", "Bearer "+s.token)
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	return send(t, req)
}

// send sends req as it is and reads the answer.
func send(t *testing.T, req *http.Request) response {
	t.Helper()
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return response{resp.StatusCode, resp.Header, b}
}

// sessionJSON is a session as the API answers it.
type sessionJSON struct {
	ID             string            `json:"id"`
	AppName        string            `json:"appName"`
	UserID         string            `json:"userId"`
	State          map[string]any    `json:"state"`
	Events         []json.RawMessage `json:"events"`
	LastUpdateTime json.Number       `json:"lastUpdateTime"`
}

type eventJSON struct {
	ID           string         `json:"id"`
	InvocationID string         `json:"invocationId"`
	Author       string         `json:"author"`
	Timestamp    json.Number    `json:"timestamp"`
	Content      map[string]any `json:"content"`
	Actions      struct {
		StateDelta map[string]any `json:"stateDelta"`
	} `json:"actions"`
}

func (s sessionJSON) events(t *testing.T) []eventJSON {
	t.Helper()
	out := make([]eventJSON, len(s.Events))
	for i, raw := range s.Events {
		require.NoError(t, json.Unmarshal(raw, &out[i]))
	}
	return out
}
