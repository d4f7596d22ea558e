package httpapi

import (
	"fmt"
	"net/http"

	"github.com/adksession/adksession/service"
)

// forkRequest is the body of POST .../sessions/{id}/fork, snake_case as
// ADK's request bodies or camelCase; both fields are optional.
type forkRequest struct {
	NewSessionID       string `json:"new_session_id"`
	NewSessionIDCamel  string `json:"newSessionId"`
	BeforeInvocation   string `json:"before_invocation_id"`
	BeforeInvocationCm string `json:"beforeInvocationId"`
}

// field returns the value of a field given in either spelling; both given
// and different is a bad request naming them.
func field(snake, camel, snakeName, camelName string) (string, error) {
	if snake != "" && camel != "" && snake != camel {
		return "", badRequest(fmt.Sprintf("request body: %s %q and %s %q differ", snakeName, snake, camelName, camel))
	}
	return firstSet(snake, camel), nil
}

// fork: POST .../sessions/{id}/fork makes a new session of the same user
// with copies of the session's events before the first event of
// before_invocation_id (all of them without it) and the state of that point
// (service.Fork), and answers 201 with the new session. An empty
// new_session_id gets a UUID. An unknown session or invocation is 404, an
// existing new_session_id 409.
func (h *Handler) fork(w http.ResponseWriter, r *http.Request) error {
	var req forkRequest
	if _, err := decodeBody(r, &req); err != nil {
		return err
	}
	nid, err := field(req.NewSessionID, req.NewSessionIDCamel, "new_session_id", "newSessionId")
	if err != nil {
		return err
	}
	before, err := field(req.BeforeInvocation, req.BeforeInvocationCm, "before_invocation_id", "beforeInvocationId")
	if err != nil {
		return err
	}
	resp, err := h.svc.Fork(r.Context(), &service.ForkRequest{AppName: r.PathValue("app"), UserID: r.PathValue("user"),
		SessionID: r.PathValue("id"), NewSessionID: nid, BeforeInvocationID: before})
	if err != nil {
		return err
	}
	s := resp.Session
	h.recent.touch(s.AppName(), s.UserID(), s.ID(), s.LastUpdateTime())
	writeSession(w, http.StatusCreated, s)
	return nil
}
