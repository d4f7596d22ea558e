package httpapi

import (
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/adksession/adksession/service"
)

// appendEvent: POST .../sessions/{id}/events, body one event in ADK's API
// form. The client names the revision it has with "If-Match: <ETag>" or
// ?lastUpdateTime=<float epoch seconds>; when the session has moved on the
// answer is 409 and nothing is written. Without one the event is appended
// to the session as it is now. Either way it is one script call
// (service.AppendTo): no read first, no lock. Answers the stored event (id,
// timestamp filled in) and, as ETag, the session's revision it made (a
// retried event, already stored, answers the stored event and its time).
func (h *Handler) appendEvent(w http.ResponseWriter, r *http.Request) error {
	ev := &service.Event{}
	empty, err := decodeBody(r, ev)
	if err != nil {
		return err
	}
	if empty {
		return badRequest("request body: an event is required")
	}
	want, _, err := wantRevision(r)
	if err != nil {
		return err
	}
	start := time.Now()
	err = h.svc.AppendTo(r.Context(), &service.AppendToRequest{
		AppName: r.PathValue("app"), UserID: r.PathValue("user"), SessionID: r.PathValue("id"), Event: ev, IfLastUpdate: want,
	})
	h.metrics.appendLatency.Observe(time.Since(start).Seconds())
	if err != nil {
		return err
	}
	h.metrics.appends.Inc()
	h.metrics.appendRate.add(time.Now())
	h.recent.touch(r.PathValue("app"), r.PathValue("user"), r.PathValue("id"), ev.Timestamp)
	w.Header().Set("ETag", etag(ev.Timestamp))
	writeJSON(w, http.StatusOK, ev)
	return nil
}

// wantRevision reads the revision the client says it has.
func wantRevision(r *http.Request) (time.Time, bool, error) {
	if v := r.Header.Get("If-Match"); v != "" {
		v = strings.Trim(strings.TrimPrefix(strings.TrimSpace(v), "W/"), `"`)
		us, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return time.Time{}, false, badRequest(fmt.Sprintf("If-Match: %q is not an ETag this server issued", v))
		}
		return time.UnixMicro(us).UTC(), true, nil
	}
	if v := r.URL.Query().Get("lastUpdateTime"); v != "" {
		t, err := parseEpochSeconds("lastUpdateTime", v)
		return t, err == nil, err
	}
	return time.Time{}, false, nil
}
