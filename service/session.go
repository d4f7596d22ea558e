package service

import (
	"fmt"
	"iter"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/adksession/adksession/cache"
	"github.com/adksession/adksession/cache/base"
)

// Session is a handle on a stored session: its identity, a window of its
// events and its merged state (app:, user:, session and, for the handle
// that wrote them or a Get with InvocationID, temp: keys). AppendEvent
// updates it in place. A Session is safe for concurrent use.
type Session struct {
	ref base.SessionRef

	mu         sync.RWMutex
	state      map[string]any
	events     []*Event
	lastUpdate time.Time
	inc        int64  // incarnation of the session (create time µs): a handle outlives no Delete
	rev        int64  // last seq this handle has seen
	lastTs     int64  // µs of the last event this handle has seen
	tempInv    string // invocation whose temp: keys the handle holds

	keys atomic.Pointer[handleKeys] // the session's Redis keys, built by its first append
}

// handleKeys are a session's Redis keys as one Store names them.
type handleKeys struct {
	store *cache.Store
	keys  cache.SessionKeys
}

// cacheKeys returns the session's keys in store, built once per handle:
// every append needs them, and they cost more to build than to keep.
func (s *Session) cacheKeys(store *cache.Store) *cache.SessionKeys {
	if k := s.keys.Load(); k != nil && k.store == store {
		return &k.keys
	}
	k := &handleKeys{store: store, keys: store.Keys().Session(s.ref.App, s.ref.User, s.ref.ID)}
	s.keys.Store(k)
	return &k.keys
}

// ID is the session id.
func (s *Session) ID() string { return s.ref.ID }

// AppName is the app the session belongs to.
func (s *Session) AppName() string { return s.ref.App }

// UserID is the user the session belongs to.
func (s *Session) UserID() string { return s.ref.User }

// LastUpdateTime is the timestamp of the last appended event, or the
// creation time before any.
func (s *Session) LastUpdateTime() time.Time {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.lastUpdate
}

// State is the session's merged state.
func (s *Session) State() State { return State{s} }

// Events are the session's events in append order (the window, or the
// compacted view, that was asked for, and the events appended since).
func (s *Session) Events() Events { return Events{s} }

// State reads a session's merged state: keys with their scope prefix.
type State struct{ s *Session }

// Get returns the value of key, or ErrStateKeyNotExist.
func (st State) Get(key string) (any, error) {
	st.s.mu.RLock()
	defer st.s.mu.RUnlock()
	v, ok := st.s.state[key]
	if !ok {
		return nil, fmt.Errorf("%w: %q in %s", ErrStateKeyNotExist, key, st.s.ref.String())
	}
	return v, nil
}

// All yields every key and value, in key order.
func (st State) All() iter.Seq2[string, any] {
	st.s.mu.RLock()
	snapshot := maps.Clone(st.s.state)
	st.s.mu.RUnlock()
	return func(yield func(string, any) bool) {
		for _, k := range slices.Sorted(maps.Keys(snapshot)) {
			if !yield(k, snapshot[k]) {
				return
			}
		}
	}
}

// Len is the number of keys.
func (st State) Len() int {
	st.s.mu.RLock()
	defer st.s.mu.RUnlock()
	return len(st.s.state)
}

// Events reads a session's events.
type Events struct{ s *Session }

// All yields the events in append order.
func (ev Events) All() iter.Seq[*Event] {
	ev.s.mu.RLock()
	snapshot := slices.Clone(ev.s.events)
	ev.s.mu.RUnlock()
	return slices.Values(snapshot)
}

// Len is the number of events.
func (ev Events) Len() int {
	ev.s.mu.RLock()
	defer ev.s.mu.RUnlock()
	return len(ev.s.events)
}

// At is the i-th event, 0 <= i < Len().
func (ev Events) At(i int) *Event {
	ev.s.mu.RLock()
	defer ev.s.mu.RUnlock()
	return ev.s.events[i]
}
