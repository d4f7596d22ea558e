package service

import (
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/adksession/adksession/cache"
	"github.com/adksession/adksession/cache/eventjson"
)

// preparedEvent is an event AppendEvent may send: everything checked.
type preparedEvent struct {
	stored     *Event // a copy of the caller's event with id and timestamp set, temp: keys removed
	blob       []byte // stored, in API form
	delta      cache.StateDelta
	normalized map[string]any // the delta's values as a Get returns them
}

// ValidateEvent tells whether AppendEvent would refuse ev as bad input (an
// error wrapping ErrInvalidArgument), whatever the session; it writes
// nothing and leaves ev as it is. A Partial event is never refused.
func (s *Service) ValidateEvent(ev *Event) error {
	if ev == nil {
		return fmt.Errorf("%w: event: nil", ErrInvalidArgument)
	}
	if ev.Partial {
		return nil
	}
	_, err := s.prepareEvent(ev)
	return err
}

// ValidateEvents tells whether appending evs in order to a new session
// would refuse one of them as bad input: each as ValidateEvent, and an id
// that two of them carry for different events (an append would answer
// ErrAlreadyExists) is ErrInvalidArgument naming both. The same event
// twice (a timestamp aside) is no error: its second append writes nothing,
// as a retry's. It writes nothing and leaves evs as they are.
func (s *Service) ValidateEvents(evs []*Event) error {
	first := map[string]int{} // event id -> index of its first event
	for i, ev := range evs {
		if err := s.ValidateEvent(ev); err != nil {
			return fmt.Errorf("events[%d]: %w", i, err)
		}
		if ev.Partial || ev.ID == "" {
			continue
		}
		j, ok := first[ev.ID]
		if !ok {
			first[ev.ID] = i
			continue
		}
		stored, err := json.Marshal(evs[j])
		if err != nil {
			return fmt.Errorf("%w: events[%d]: %v", ErrInvalidArgument, j, err)
		}
		same, err := isRetryOf(string(stored), ev)
		if err != nil {
			return fmt.Errorf("%w: events[%d]: %v", ErrInvalidArgument, i, err)
		}
		if !same {
			return fmt.Errorf("%w: events[%d]: id %q is also events[%d]'s, a different event (an id names one event of a session)",
				ErrInvalidArgument, i, ev.ID, j)
		}
	}
	return nil
}

// prepareEvent checks ev and builds what AppendEvent sends, on a copy:
// bad input leaves ev as it was. See docs/design.md, "Bad input".
func (s *Service) prepareEvent(ev *Event) (*preparedEvent, error) {
	if ev.ID != "" {
		if err := checkID("event.ID", ev.ID, MaxIDBytes); err != nil {
			return nil, err
		}
	}
	if ev.InvocationID != "" {
		if err := checkID("event.InvocationID", ev.InvocationID, MaxInvocationIDBytes); err != nil {
			return nil, err
		}
	}
	if !ev.Timestamp.IsZero() {
		if err := checkTimestamp("event.Timestamp", ev.Timestamp); err != nil {
			return nil, err
		}
	}
	for f, v := range ev.Actions.ArtifactDelta {
		if v < -1 || v >= maxCount {
			return nil, fmt.Errorf("%w: event.actions.artifactDelta%s: version %d, must be in [-1, 2^53) (-1: no version, as a rewind names it)",
				ErrInvalidArgument, eventjson.PathKey(f), v)
		}
	}
	delta, normalized, err := s.splitDelta("actions.stateDelta", ev.Actions.StateDelta)
	if err != nil {
		return nil, err
	}
	stored := ev.Clone()
	if stored.ID == "" {
		stored.ID = uuid.NewString()
	}
	if stored.Timestamp.IsZero() {
		stored.Timestamp = time.Now()
	}
	stored.Timestamp = stored.Timestamp.Truncate(time.Microsecond).UTC()
	for k := range stored.Actions.StateDelta {
		if strings.HasPrefix(k, TempPrefix) {
			delete(stored.Actions.StateDelta, k)
		}
	}
	w := jsonWriter{buf: make([]byte, 0, len(stored.Content)+512), cached: true}
	stored.write(&w)
	if w.err != nil {
		return nil, fmt.Errorf("%w: event.%v", ErrInvalidArgument, w.err)
	}
	blob := w.buf
	if len(blob) > s.cfg.MaxEventBytes {
		return nil, fmt.Errorf("%w: event: %d bytes of JSON, limit %d (Config.MaxEventBytes)", ErrInvalidArgument, len(blob), s.cfg.MaxEventBytes)
	}
	total := len(blob)
	for _, p := range delta.Temp {
		total += len(p.Key) + len(p.Value)
	}
	if total > s.cfg.MaxWriteBytes {
		return nil, fmt.Errorf("%w: event: %d bytes of JSON and temp: state, limit %d (Config.MaxWriteBytes)", ErrInvalidArgument, total, s.cfg.MaxWriteBytes)
	}
	sc := getScan()
	defer putScan(sc)
	if !sc.check(blob, true) {
		return nil, sc.err("event")
	}
	if path, problem := eventjson.CheckAPI(blob); problem != "" {
		return nil, fmt.Errorf("%w: event%s: %s", ErrInvalidArgument, path, problem)
	}
	return &preparedEvent{stored: stored, blob: blob, delta: delta, normalized: normalized}, nil
}

// rawEventJSON tells which values of an event's API form are raw JSON the
// caller gave (Content, the json.RawMessage fields and maps, Extra), not
// encoded by encoding/json from Go values.
func rawEventJSON(path [][]byte) bool {
	switch len(path) {
	case 1:
		k := string(path[0])
		return k == "content" || !eventKeys[k]
	case 2:
		if string(path[0]) != "actions" {
			return false
		}
		k := string(path[1])
		return k == "agentState" || k == "compaction" || !actionKeys[k]
	case 3:
		k := string(path[1])
		return string(path[0]) == "actions" && (k == "requestedAuthConfigs" || k == "requestedToolConfirmations")
	}
	return false
}
