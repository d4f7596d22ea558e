package httpapi

import (
	"fmt"
	"net/http"
	"time"

	"github.com/adksession/adksession/service"
)

// rewindRequest is the body of POST .../sessions/{id}/rewind: ADK's
// {"rewind_before_invocation_id": X} (or its camelCase alias), or
// adksession's earlier {"beforeInvocationId": X}.
type rewindRequest struct {
	ADK      string `json:"rewind_before_invocation_id"`
	ADKCamel string `json:"rewindBeforeInvocationId"`
	Own      string `json:"beforeInvocationId"`
	OwnSnake string `json:"before_invocation_id"`
}

// invocation returns the invocation to rewind before, and whether the
// body is ADK's.
func (req *rewindRequest) invocation() (id string, adk bool, err error) {
	adkID, ownID := firstSet(req.ADK, req.ADKCamel), firstSet(req.Own, req.OwnSnake)
	switch {
	case adkID == "" && ownID == "":
		return "", false, badRequest("request body: rewind_before_invocation_id is required")
	case adkID != "" && ownID != "" && adkID != ownID:
		return "", false, badRequest(fmt.Sprintf("request body: rewind_before_invocation_id %q and beforeInvocationId %q differ", adkID, ownID))
	case adkID != "":
		return adkID, true, nil
	}
	return ownID, false, nil
}

func firstSet(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// rewind: POST .../sessions/{id}/rewind appends a rewind event restoring
// the session state to just before invocation X (service.Rewind). With
// ADK's body it answers the session, as ADK's api_server; with
// {"beforeInvocationId": X} the rewind event. Either way the ETag is the
// session's new revision. An unknown session or invocation is 404.
func (h *Handler) rewind(w http.ResponseWriter, r *http.Request) error {
	var req rewindRequest
	if _, err := decodeBody(r, &req); err != nil {
		return err
	}
	inv, adk, err := req.invocation()
	if err != nil {
		return err
	}
	app, user, sid := r.PathValue("app"), r.PathValue("user"), r.PathValue("id")
	ev, err := h.svc.Rewind(r.Context(), &service.RewindRequest{AppName: app, UserID: user, SessionID: sid, BeforeInvocationID: inv})
	if err != nil {
		return err
	}
	h.metrics.appends.Inc()
	h.metrics.appendRate.add(time.Now())
	if !adk {
		w.Header().Set("ETag", etag(ev.Timestamp))
		writeJSON(w, http.StatusOK, ev)
		return nil
	}
	full, err := h.svc.Get(r.Context(), &service.GetRequest{AppName: app, UserID: user, SessionID: sid})
	if err != nil {
		return err
	}
	h.recent.touch(full.Session.AppName(), full.Session.UserID(), full.Session.ID(), full.Session.LastUpdateTime())
	writeSession(w, http.StatusOK, full.Session)
	return nil
}
