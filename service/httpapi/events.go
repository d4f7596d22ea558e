package httpapi

import (
	"errors"
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/adksession/adksession/service"
)

// appendRetries bounds how often an append without a revision retries when
// another writer appended between its read and its write.
const appendRetries = 20

// appendEvent: POST .../sessions/{id}/events, body one event in ADK's API
// form. The client names the revision it has with "If-Match: <ETag>" or
// ?lastUpdateTime=<float epoch seconds>; when the session has moved on the
// answer is 409 and nothing is written. Without one the event is appended
// as the latest. Answers the stored event (id, timestamp filled in) and the
// session's new revision as ETag.
func (h *Handler) appendEvent(w http.ResponseWriter, r *http.Request) error {
	ev := &service.Event{}
	empty, err := decodeBody(r, ev)
	if err != nil {
		return err
	}
	if empty {
		return badRequest("request body: an event is required")
	}
	want, hasWant, err := wantRevision(r)
	if err != nil {
		return err
	}
	var sess *service.Session
	if hasWant {
		sess, err = h.appendAt(r, ev, want)
	} else {
		sess, err = h.appendLatest(r, ev)
	}
	if err != nil {
		return err
	}
	w.Header().Set("ETag", etag(sess.LastUpdateTime()))
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

// handle reads a handle on the session, with its newest event only.
func (h *Handler) handle(r *http.Request) (*service.Session, error) {
	resp, err := h.svc.Get(r.Context(), &service.GetRequest{
		AppName: r.PathValue("app"), UserID: r.PathValue("user"), SessionID: r.PathValue("id"), NumRecentEvents: 1,
	})
	if err != nil {
		return nil, err
	}
	return resp.Session, nil
}

// appendAt appends ev when the session is still at revision want.
func (h *Handler) appendAt(r *http.Request, ev *service.Event, want time.Time) (*service.Session, error) {
	sess, err := h.handle(r)
	if err != nil {
		return nil, err
	}
	if got := sess.LastUpdateTime(); !got.Equal(want) {
		return nil, fmt.Errorf("%w: session %s is at revision %s, the request names %s", service.ErrStaleSession, sess.ID(), etag(got), etag(want))
	}
	return sess, h.append(r, sess, ev)
}

// appendLatest appends ev to the session as it is now, reading it again
// when another writer got in between. Appends to one session through this
// handler take turns, so only other processes can get in between.
func (h *Handler) appendLatest(r *http.Request, ev *service.Event) (*service.Session, error) {
	mu := h.appendLocks.of(r.PathValue("app"), r.PathValue("user"), r.PathValue("id"))
	mu.Lock()
	defer mu.Unlock()
	for attempt := 1; ; attempt++ {
		sess, err := h.handle(r)
		if err != nil {
			return nil, err
		}
		err = h.append(r, sess, ev)
		if !errors.Is(err, service.ErrStaleSession) || attempt == appendRetries {
			return sess, err
		}
		// Back off a little, at random, so that writers racing from several
		// processes do not collide again.
		select {
		case <-time.After(time.Duration(rand.Int64N(int64(attempt) * int64(time.Millisecond)))):
		case <-r.Context().Done():
			return nil, r.Context().Err()
		}
	}
}

// stripedLocks are mutexes picked by a hash of a session's identity.
type stripedLocks [64]sync.Mutex

func (l *stripedLocks) of(app, user, sid string) *sync.Mutex {
	h := fnv.New32a()
	for _, s := range []string{app, user, sid} {
		h.Write([]byte(s))
		h.Write([]byte{0})
	}
	return &l[h.Sum32()%uint32(len(l))]
}

// append appends through a handle and counts it.
func (h *Handler) append(r *http.Request, sess *service.Session, ev *service.Event) error {
	start := time.Now()
	err := h.svc.AppendEvent(r.Context(), sess, ev)
	h.metrics.appendLatency.Observe(time.Since(start).Seconds())
	if err != nil {
		return err
	}
	h.metrics.appends.Inc()
	h.metrics.appendRate.add(time.Now())
	h.recent.touch(sess)
	return nil
}
