package httpapi

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/adksession/adksession/service"
)

// sessionJSON is a session as ADK's api_server answers it.
type sessionJSON struct {
	ID             string           `json:"id"`
	AppName        string           `json:"appName"`
	UserID         string           `json:"userId"`
	State          map[string]any   `json:"state"`
	Events         []*service.Event `json:"events"`
	LastUpdateTime json.RawMessage  `json:"lastUpdateTime"`
}

func toJSON(s *service.Session) *sessionJSON {
	out := &sessionJSON{
		ID: s.ID(), AppName: s.AppName(), UserID: s.UserID(),
		State:          map[string]any{},
		Events:         make([]*service.Event, 0, s.Events().Len()),
		LastUpdateTime: epochSeconds(s.LastUpdateTime()),
	}
	for k, v := range s.State().All() {
		out.State[k] = v
	}
	for ev := range s.Events().All() {
		out.Events = append(out.Events, ev)
	}
	return out
}

// writeSession answers a session with its revision as ETag.
func writeSession(w http.ResponseWriter, code int, s *service.Session) {
	w.Header().Set("ETag", etag(s.LastUpdateTime()))
	writeJSON(w, code, toJSON(s))
}

// etag is a session's revision: the µs of its last update. Within a session
// every append moves it forward, so it names one revision.
func etag(t time.Time) string { return `"` + strconv.FormatInt(t.UnixMicro(), 10) + `"` }

// epochSeconds writes t as float epoch seconds with exactly its microseconds.
func epochSeconds(t time.Time) json.RawMessage {
	us := t.UnixMicro()
	sec, frac := us/1e6, us%1e6
	if frac < 0 {
		sec, frac = sec-1, frac+1e6
	}
	return json.RawMessage(fmt.Sprintf("%d.%06d", sec, frac))
}

// parseEpochSeconds reads float epoch seconds to the microsecond.
func parseEpochSeconds(name, v string) (time.Time, error) {
	f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
	if err != nil || math.IsNaN(f) || math.IsInf(f, 0) || f < 0 {
		return time.Time{}, badRequest(fmt.Sprintf("%s: %q is not epoch seconds", name, v))
	}
	// 1e10 s (year 2286) is beyond every event timestamp: a larger bound
	// means the same, and its microseconds could overflow an int64.
	f = min(f, 1e10)
	sec, frac := math.Modf(f)
	return time.UnixMicro(int64(sec)*1e6 + int64(math.Round(frac*1e6))).UTC(), nil
}

// queryInt reads a non-negative integer query parameter (0 when absent).
func queryInt(r *http.Request, name string) (int, error) {
	v := r.URL.Query().Get(name)
	if v == "" {
		return 0, nil
	}
	n, err := strconv.Atoi(v)
	switch {
	case errors.Is(err, strconv.ErrRange):
		return 0, badRequest(fmt.Sprintf("%s: %q is beyond a 64-bit integer", name, v))
	case err != nil || n < 0:
		return 0, badRequest(fmt.Sprintf("%s: %q is not a non-negative integer", name, v))
	}
	return n, nil
}

// queryBool reads a boolean query parameter, true or false (also 1 or 0;
// false when absent).
func queryBool(r *http.Request, name string) (bool, error) {
	switch v := r.URL.Query().Get(name); v {
	case "", "false", "0":
		return false, nil
	case "true", "1":
		return true, nil
	default:
		return false, badRequest(fmt.Sprintf("%s: %q is not true or false", name, v))
	}
}

// decodeBody decodes a JSON body into v; an empty body leaves v as it is.
// A body that is not UTF-8 (RFC 8259) is refused: decoding would replace
// its invalid bytes in strings with U+FFFD.
func decodeBody(r *http.Request, v any) (empty bool, err error) {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			return false, err
		}
		return false, badRequest("request body: " + err.Error())
	}
	if !utf8.Valid(body) {
		return false, badRequest("request body: not valid UTF-8")
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	if err := dec.Decode(v); err != nil {
		if errors.Is(err, io.EOF) {
			return true, nil
		}
		return false, badRequest("request body: " + err.Error())
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return false, badRequest("request body: data after the JSON value")
	}
	return false, nil
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }
