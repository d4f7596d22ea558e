package httpapi

import (
	"context"
	"net/http"
)

// deadLetterJSON is one dead letter as the dashboard shows it.
type deadLetterJSON struct {
	Shard     int               `json:"shard"`
	Entry     string            `json:"entry"` // its text: what retry and drop name it by
	ID        string            `json:"id"`
	Kind      string            `json:"kind"`
	Unit      string            `json:"unit"`
	AppName   string            `json:"appName"`
	UserID    string            `json:"userId"`
	SessionID string            `json:"sessionId"`
	Reason    string            `json:"reason"`
	Time      float64           `json:"time"` // epoch seconds, 0 when unknown
	Fields    map[string]string `json:"fields"`
	// Conflict: an acknowledged event the database cannot take (retry
	// refuses it; the entry holds the event).
	Conflict bool `json:"conflict,omitempty"`
}

// deadLetters: GET /api/deadletters?limit=N (default 50): every shard's
// dead letters, how many and the oldest N, as
// {"total", "shards": [{"shard", "count", "letters": [...]}]}.
func (h *Handler) deadLetters(w http.ResponseWriter, r *http.Request) error {
	limit, err := queryInt(r, "limit")
	if err != nil {
		return err
	}
	if limit == 0 {
		limit = 50
	}
	shards, err := h.svc.DeadLetters(r.Context(), limit)
	if err != nil {
		return err
	}
	type shardJSON struct {
		Shard   int              `json:"shard"`
		Count   int64            `json:"count"`
		Letters []deadLetterJSON `json:"letters"`
	}
	out := struct {
		Total  int64       `json:"total"`
		Shards []shardJSON `json:"shards"`
	}{Shards: []shardJSON{}}
	for _, sh := range shards {
		js := shardJSON{Shard: sh.Shard, Count: sh.Count, Letters: make([]deadLetterJSON, len(sh.Letters))}
		out.Total += sh.Count
		for i, d := range sh.Letters {
			js.Letters[i] = deadLetterJSON{Shard: d.Shard, Entry: d.Entry, ID: d.ID, Kind: d.Kind, Unit: d.Unit, AppName: d.AppName, UserID: d.UserID,
				SessionID: d.SessionID, Reason: d.Reason, Fields: d.Fields, Conflict: d.Conflict}
			if !d.Time.IsZero() {
				js.Letters[i].Time = float64(d.Time.UnixMicro()) / 1e6
			}
		}
		out.Shards = append(out.Shards, js)
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

// deadLetterAction is the body of POST /api/deadletters/retry and /drop.
type deadLetterAction struct {
	Shard *int   `json:"shard"`
	Entry string `json:"entry"`
}

func (h *Handler) readDeadLetterAction(r *http.Request) (int, string, error) {
	var a deadLetterAction
	if _, err := decodeBody(r, &a); err != nil {
		return 0, "", err
	}
	switch {
	case a.Shard == nil:
		return 0, "", badRequest("shard: required")
	case a.Entry == "":
		return 0, "", badRequest("entry: required (the dead letter's text, as GET /api/deadletters answers it)")
	}
	return *a.Shard, a.Entry, nil
}

// retryDeadLetter: POST /api/deadletters/retry {"shard", "entry"} puts
// the dead letter's change back on its shard's change log: {"retried":
// true}. 404 when the list no longer holds it.
func (h *Handler) retryDeadLetter(w http.ResponseWriter, r *http.Request) error {
	return h.deadLetterAction(w, r, h.svc.RetryDeadLetter, "retried")
}

// dropDeadLetter: POST /api/deadletters/drop {"shard", "entry"} forgets
// the dead letter: {"dropped": true}. 404 when the list no longer holds it.
func (h *Handler) dropDeadLetter(w http.ResponseWriter, r *http.Request) error {
	return h.deadLetterAction(w, r, h.svc.DropDeadLetter, "dropped")
}

func (h *Handler) deadLetterAction(w http.ResponseWriter, r *http.Request, act func(context.Context, int, string) error, done string) error {
	shard, entry, err := h.readDeadLetterAction(r)
	if err != nil {
		return err
	}
	if err := act(r.Context(), shard, entry); err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, map[string]any{done: true})
	return nil
}
