package httpapi_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/alicebob/miniredis/v2"
	"github.com/stretchr/testify/require"

	"github.com/adksession/adksession/integration/testenv"
	"github.com/adksession/adksession/service"
	"github.com/adksession/adksession/service/httpapi"
)

// backend is a Redis the API tests run against.
type backend struct {
	name string
	url  func(t *testing.T) string
}

// backends are real Redis (from integration/testenv.sh) and miniredis, the
// embedded default of `adksession serve`: the whole API must work on both.
var backends = []backend{
	{"redis", func(t *testing.T) string { return testenv.RedisURL(t) }},
	{"miniredis", func(t *testing.T) string { return "redis://" + miniredis.RunT(t).Addr() + "/0" }},
}

// eachBackend runs f once per backend.
func eachBackend(t *testing.T, f func(t *testing.T, url string)) {
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			url := b.url(t) // skips without a real Redis outside testenv.sh
			t.Parallel()
			f(t, url)
		})
	}
}

// apiServer is an httptest server over a fresh service namespace.
type apiServer struct {
	*httptest.Server
	svc   *service.Service
	token string
}

func newAPIServer(t *testing.T, redisURL string, opt httpapi.Options) *apiServer {
	t.Helper()
	ctx := context.Background()
	svc, err := service.Open(ctx, service.Config{RedisURL: redisURL, Namespace: testenv.UniqueName(t, "httpapi-"), MaxEventBytes: opt.MaxEventBytes})
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
