package httpapi

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/adksession/adksession/service"
)

// createRequest is the body of POST .../sessions, as ADK's
// CreateSessionRequest (camelCase or snake_case keys).
type createRequest struct {
	SessionID  string           `json:"sessionId"`
	SessionID2 string           `json:"session_id"`
	State      map[string]any   `json:"state"`
	Events     []*service.Event `json:"events"`
}

// create: POST /apps/{app}/users/{user}/sessions, body {"sessionId"?,
// "state"?, "events"?} (all optional). The events are appended in order.
func (h *Handler) create(w http.ResponseWriter, r *http.Request) error {
	var req createRequest
	if _, err := decodeBody(r, &req); err != nil {
		return err
	}
	sid := req.SessionID
	if sid == "" {
		sid = req.SessionID2
	}
	return h.createSession(w, r, sid, req.State, req.Events)
}

// createWithID: POST /apps/{app}/users/{user}/sessions/{id}, body the
// initial state object (optional), as ADK's api_server.
func (h *Handler) createWithID(w http.ResponseWriter, r *http.Request) error {
	var state map[string]any
	if _, err := decodeBody(r, &state); err != nil {
		return err
	}
	return h.createSession(w, r, r.PathValue("id"), state, nil)
}

func (h *Handler) createSession(w http.ResponseWriter, r *http.Request, sid string, state map[string]any, events []*service.Event) error {
	app, user := r.PathValue("app"), r.PathValue("user")
	// All or nothing. Bad events (one id for two different events among
	// them too) are refused before anything is written; an append that
	// fails all the same (Redis down, the client gone) deletes the session
	// again, so that the request can be sent again.
	if err := h.svc.ValidateEvents(events); err != nil {
		return err
	}
	resp, err := h.svc.Create(r.Context(), &service.CreateRequest{AppName: app, UserID: user, SessionID: sid, State: state})
	if err != nil {
		return err
	}
	for _, ev := range events {
		if err := h.svc.AppendEvent(r.Context(), resp.Session, ev); err != nil {
			return h.undoCreate(r, resp.Session, err)
		}
		h.metrics.appends.Inc()
		h.metrics.appendRate.add(time.Now())
	}
	h.recent.touch(resp.Session.AppName(), resp.Session.UserID(), resp.Session.ID(), resp.Session.LastUpdateTime())
	writeSession(w, http.StatusOK, resp.Session)
	return nil
}

// undoCreate deletes the session a create with events made when one of
// its appends failed with err, and returns err (with the delete's error,
// if that failed too). The delete runs even when the request's context has
// ended, within a bound of its own.
func (h *Handler) undoCreate(r *http.Request, s *service.Session, err error) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), 30*time.Second)
	defer cancel()
	if derr := h.svc.Delete(ctx, &service.DeleteRequest{AppName: s.AppName(), UserID: s.UserID(), SessionID: s.ID()}); derr != nil {
		return fmt.Errorf("%w (and deleting the session it created failed: %v)", err, derr)
	}
	return err
}

// get: GET .../sessions/{id}?numRecentEvents=&afterTimestamp=&compacted=&invocationId=
func (h *Handler) get(w http.ResponseWriter, r *http.Request) error {
	req := &service.GetRequest{
		AppName: r.PathValue("app"), UserID: r.PathValue("user"), SessionID: r.PathValue("id"),
		InvocationID: r.URL.Query().Get("invocationId"),
	}
	var err error
	if req.NumRecentEvents, err = queryInt(r, "numRecentEvents"); err != nil {
		return err
	}
	if v := r.URL.Query().Get("afterTimestamp"); v != "" {
		if req.After, err = parseEpochSeconds("afterTimestamp", v); err != nil {
			return err
		}
	}
	if req.Compacted, err = queryBool(r, "compacted"); err != nil {
		return err
	}
	if err := checkCompacted(req); err != nil {
		return err
	}
	start := time.Now()
	resp, err := h.svc.Get(r.Context(), req)
	window := "full"
	switch {
	case req.Compacted:
		window = "compacted"
	case req.NumRecentEvents > 0 || !req.After.IsZero():
		window = "windowed"
	}
	h.metrics.getLatency.WithLabelValues(window).Observe(time.Since(start).Seconds())
	if err != nil {
		return err
	}
	h.recent.touch(resp.Session.AppName(), resp.Session.UserID(), resp.Session.ID(), resp.Session.LastUpdateTime())
	writeSession(w, http.StatusOK, resp.Session)
	return nil
}

// checkCompacted refuses compacted=true with a window, naming the query
// parameters (service.Get would name its own fields).
func checkCompacted(req *service.GetRequest) error {
	if !req.Compacted {
		return nil
	}
	var with []string
	if req.NumRecentEvents != 0 {
		with = append(with, "numRecentEvents")
	}
	if !req.After.IsZero() {
		with = append(with, "afterTimestamp")
	}
	if len(with) == 0 {
		return nil
	}
	return badRequest("compacted: the compacted view is of the whole history, not with " + strings.Join(with, " and "))
}

// list: GET .../sessions?pageSize=&pageToken= answers a JSON array of
// sessions (state, no events), as ADK's api_server; the token of the next
// page is the X-Next-Page-Token header, absent on the last page.
func (h *Handler) list(w http.ResponseWriter, r *http.Request) error {
	size, err := queryInt(r, "pageSize")
	if err != nil {
		return err
	}
	resp, err := h.svc.List(r.Context(), &service.ListRequest{
		AppName: r.PathValue("app"), UserID: r.PathValue("user"), PageSize: size, PageToken: r.URL.Query().Get("pageToken"),
	})
	if err != nil {
		return err
	}
	if resp.NextPageToken != "" {
		w.Header().Set("X-Next-Page-Token", resp.NextPageToken)
	}
	out := make([]*sessionJSON, len(resp.Sessions))
	for i, s := range resp.Sessions {
		out[i] = toJSON(s)
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

// delete: DELETE .../sessions/{id}; deleting a missing session is not an error.
func (h *Handler) delete(w http.ResponseWriter, r *http.Request) error {
	app, user, sid := r.PathValue("app"), r.PathValue("user"), r.PathValue("id")
	if err := h.svc.Delete(r.Context(), &service.DeleteRequest{AppName: app, UserID: user, SessionID: sid}); err != nil {
		return err
	}
	h.recent.forget(app, user, sid)
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// update: PATCH .../sessions/{id} with {"stateDelta": {...}} appends a
// state-only event (author "user", invocation "p-<uuid>") and answers the
// session, as ADK's api_server.
func (h *Handler) update(w http.ResponseWriter, r *http.Request) error {
	var req struct {
		StateDelta  map[string]any `json:"stateDelta"`
		StateDelta2 map[string]any `json:"state_delta"`
	}
	if _, err := decodeBody(r, &req); err != nil {
		return err
	}
	if req.StateDelta == nil {
		req.StateDelta = req.StateDelta2
	}
	if req.StateDelta == nil {
		return badRequest("request body: stateDelta is required")
	}
	ev := &service.Event{InvocationID: "p-" + uuid.NewString(), Author: "user", Actions: service.EventActions{StateDelta: req.StateDelta}}
	app, user, sid := r.PathValue("app"), r.PathValue("user"), r.PathValue("id")
	if err := h.svc.AppendTo(r.Context(), &service.AppendToRequest{AppName: app, UserID: user, SessionID: sid, Event: ev}); err != nil {
		return err
	}
	h.recent.touch(app, user, sid, ev.Timestamp)
	full, err := h.svc.Get(r.Context(), &service.GetRequest{AppName: app, UserID: user, SessionID: sid})
	if err != nil {
		return err
	}
	writeSession(w, http.StatusOK, full.Session)
	return nil
}

// userState: GET /apps/{app}/users/{user}/state answers the user-scoped
// state, keys without the "user:" prefix.
func (h *Handler) userState(w http.ResponseWriter, r *http.Request) error {
	st, err := h.svc.GetUserState(r.Context(), &service.UserStateRequest{AppName: r.PathValue("app"), UserID: r.PathValue("user")})
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, st)
	return nil
}
