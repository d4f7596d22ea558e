package loadgen

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"

	"github.com/adksession/adksession/service"
)

// Library drives a *service.Service in this process.
type Library struct{ Svc *service.Service }

// Create implements Target.
func (l Library) Create(ctx context.Context, app, user, sid string) (Session, error) {
	resp, err := l.Svc.Create(ctx, &service.CreateRequest{AppName: app, UserID: user, SessionID: sid})
	if err != nil {
		return nil, err
	}
	return libSession{l.Svc, resp.Session}, nil
}

// Get implements Target.
func (l Library) Get(ctx context.Context, app, user, sid string, numRecent int) (int, error) {
	resp, err := l.Svc.Get(ctx, &service.GetRequest{AppName: app, UserID: user, SessionID: sid, NumRecentEvents: numRecent})
	if err != nil {
		return 0, err
	}
	return resp.Session.Events().Len(), nil
}

type libSession struct {
	svc  *service.Service
	sess *service.Session
}

func (s libSession) Append(ctx context.Context, ev *service.Event) error {
	return s.svc.AppendEvent(ctx, s.sess, ev)
}

// HTTP drives an adksession server over its HTTP API.
type HTTP struct {
	BaseURL   string // http://host:port
	AuthToken string
	Client    *http.Client // default http.DefaultClient
}

func (h HTTP) sessionURL(app, user, sid string) string {
	return h.BaseURL + "/apps/" + url.PathEscape(app) + "/users/" + url.PathEscape(user) + "/sessions/" + url.PathEscape(sid)
}

func (h HTTP) do(ctx context.Context, method, u string, body any, out any) error {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, u, rd)
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	if h.AuthToken != "" {
		req.Header.Set("Authorization", "Bearer "+h.AuthToken)
	}
	c := h.Client
	if c == nil {
		c = http.DefaultClient
	}
	resp, err := c.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	if resp.StatusCode >= 300 {
		return fmt.Errorf("%s %s: %s: %s", method, u, resp.Status, bytes.TrimSpace(b))
	}
	if out != nil {
		return json.Unmarshal(b, out)
	}
	return nil
}

// Create implements Target.
func (h HTTP) Create(ctx context.Context, app, user, sid string) (Session, error) {
	u := h.sessionURL(app, user, sid)
	if err := h.do(ctx, http.MethodPost, u, map[string]any{}, nil); err != nil {
		return nil, err
	}
	return httpSession{h, u}, nil
}

// Get implements Target.
func (h HTTP) Get(ctx context.Context, app, user, sid string, numRecent int) (int, error) {
	u := h.sessionURL(app, user, sid)
	if numRecent > 0 {
		u += "?numRecentEvents=" + strconv.Itoa(numRecent)
	}
	var s struct {
		Events []json.RawMessage `json:"events"`
	}
	if err := h.do(ctx, http.MethodGet, u, nil, &s); err != nil {
		return 0, err
	}
	return len(s.Events), nil
}

type httpSession struct {
	h   HTTP
	url string
}

func (s httpSession) Append(ctx context.Context, ev *service.Event) error {
	return s.h.do(ctx, http.MethodPost, s.url+"/events", ev, nil)
}
