package adkgo

import (
	"fmt"
	"iter"
	"maps"
	"slices"
	"sync"
	"time"

	"google.golang.org/adk/v2/session"

	"github.com/adksession/adksession/service"
)

// handle is the session.Session this package returns: a *service.Session
// plus what adk-go expects of a handle that service.Session does not do,
// namely State().Set and events as adk-go's type. It is safe for
// concurrent use; appends through one handle are serialized.
type handle struct {
	inner *service.Session

	// appendMu serializes AppendEvent calls through this handle, so that the
	// handle's events stay in the order of the inner handle's.
	appendMu sync.Mutex

	mu     sync.RWMutex
	events []*session.Event // the inner handle's events, converted, same order
	// sets holds State().Set values that no appended event's delta has
	// carried yet. They live in this handle only, as in adk-go's own
	// services: persist state through an event's StateDelta.
	sets map[string]any
}

// newHandle wraps inner and converts its events.
func newHandle(inner *service.Session) (*handle, error) {
	h := &handle{inner: inner, events: make([]*session.Event, 0, inner.Events().Len())}
	for ev := range inner.Events().All() {
		c, err := fromService(ev)
		if err != nil {
			return nil, fmt.Errorf("session %s of app %s, user %s: %w", inner.ID(), inner.AppName(), inner.UserID(), err)
		}
		h.events = append(h.events, c)
	}
	return h, nil
}

func (h *handle) ID() string                { return h.inner.ID() }
func (h *handle) AppName() string           { return h.inner.AppName() }
func (h *handle) UserID() string            { return h.inner.UserID() }
func (h *handle) LastUpdateTime() time.Time { return h.inner.LastUpdateTime() }
func (h *handle) State() session.State      { return state{h} }

// Events are the handle's events in append order: the window it was read
// with plus the events appended through it.
func (h *handle) Events() session.Events {
	h.mu.RLock()
	defer h.mu.RUnlock()
	return events(slices.Clone(h.events))
}

// appended records ev, just appended through h.inner, in the handle: its
// delta's values replace State().Set ones, and the event (without temp:
// keys) joins the list. If the inner handle caught up with events appended
// elsewhere (Config.ConcurrentAppends), the list is rebuilt from it.
func (h *handle) appended(ev *session.Event) error {
	kept := *ev
	kept.LongRunningToolIDs = slices.Clone(ev.LongRunningToolIDs)
	kept.Routes = slices.Clone(ev.Routes)
	kept.CustomMetadata = maps.Clone(ev.CustomMetadata)
	kept.Actions.ArtifactDelta = maps.Clone(ev.Actions.ArtifactDelta)
	kept.Actions.RequestedToolConfirmations = maps.Clone(ev.Actions.RequestedToolConfirmations)
	kept.Actions.StateDelta = maps.Clone(ev.Actions.StateDelta)
	maps.DeleteFunc(kept.Actions.StateDelta, func(k string, _ any) bool { return hasTemp(k) })

	h.mu.Lock()
	defer h.mu.Unlock()
	for k := range ev.Actions.StateDelta {
		delete(h.sets, k)
	}
	if h.inner.Events().Len() == len(h.events)+1 {
		h.events = append(h.events, &kept)
		return nil
	}
	have := make(map[string]*session.Event, len(h.events)+1)
	for _, e := range h.events {
		have[e.ID] = e
	}
	have[kept.ID] = &kept
	rebuilt := make([]*session.Event, 0, h.inner.Events().Len())
	for e := range h.inner.Events().All() {
		c, ok := have[e.ID]
		if !ok {
			var err error
			if c, err = fromService(e); err != nil {
				return fmt.Errorf("session %s of app %s, user %s: %w", h.inner.ID(), h.inner.AppName(), h.inner.UserID(), err)
			}
		}
		rebuilt = append(rebuilt, c)
	}
	h.events = rebuilt
	return nil
}

// state is the handle's merged state: the stored one (app:, user:,
// session and this invocation's temp: keys) under the State().Set values.
type state struct{ h *handle }

// Get returns the value of key, or an error matching
// session.ErrStateKeyNotExist.
func (s state) Get(key string) (any, error) {
	s.h.mu.RLock()
	v, ok := s.h.sets[key]
	s.h.mu.RUnlock()
	if ok {
		return v, nil
	}
	v, err := s.h.inner.State().Get(key)
	if err != nil {
		return nil, fmt.Errorf("%w: %q in session %s of app %s, user %s", session.ErrStateKeyNotExist, key, s.h.inner.ID(), s.h.inner.AppName(), s.h.inner.UserID())
	}
	return v, nil
}

// Set changes the value of key in this handle only (as adk-go's own
// services do); an event's StateDelta is what persists state.
func (s state) Set(key string, value any) error {
	s.h.mu.Lock()
	defer s.h.mu.Unlock()
	if s.h.sets == nil {
		s.h.sets = make(map[string]any)
	}
	s.h.sets[key] = value
	return nil
}

// All yields every key and value (in key order, which adk-go does not promise).
func (s state) All() iter.Seq2[string, any] {
	merged := maps.Collect(s.h.inner.State().All())
	s.h.mu.RLock()
	maps.Copy(merged, s.h.sets)
	s.h.mu.RUnlock()
	return func(yield func(string, any) bool) {
		for _, k := range slices.Sorted(maps.Keys(merged)) {
			if !yield(k, merged[k]) {
				return
			}
		}
	}
}

// events is a snapshot of a handle's events.
type events []*session.Event

func (e events) All() iter.Seq[*session.Event] { return slices.Values(e) }
func (e events) Len() int                      { return len(e) }

// At returns the i-th event, or nil when i is out of range (as adk-go's
// in-memory service).
func (e events) At(i int) *session.Event {
	if i < 0 || i >= len(e) {
		return nil
	}
	return e[i]
}
