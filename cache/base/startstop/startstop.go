// Package startstop is the lifecycle the module's background services share:
// the flusher's loop (persist), the background prune and the compaction
// index builds (service), the dashboard's history (service/httpapi). Each
// used to hand-roll its cancel function, done channel, once, jitter and
// rate-limited log; they are here once.
//
// A Base runs one task at a time in a goroutine of its own, under a context
// that Stop cancels; Stop waits for the task and refuses every later Start.
// Signal is a typed test signal: production code sends on it, and only a
// test that called Init receives. Like cache/base, it imports nothing of the
// module.
package startstop

import (
	"context"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"
)

// Base runs a background task, one at a time, until Stop. The zero value is
// ready; a Base must not be copied after its first Start.
type Base struct {
	mu      sync.Mutex
	cancel  context.CancelFunc
	running bool
	stopped bool
	wg      sync.WaitGroup
}

// Start runs task in a new goroutine and returns true; it runs nothing and
// returns false while a task it started is running, or after Stop. task's
// context carries ctx's values but not its cancellation (a request's context
// that starts a background task does not end it): it is cancelled by Stop
// only. When task returns, Start may run another.
func (b *Base) Start(ctx context.Context, task func(ctx context.Context)) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.running || b.stopped {
		return false
	}
	ctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	b.running, b.cancel = true, cancel
	b.wg.Add(1)
	go func() {
		defer b.wg.Done()
		defer func() {
			cancel()
			b.mu.Lock()
			b.running = false
			b.mu.Unlock()
		}()
		task(ctx)
	}()
	return true
}

// Stop cancels the running task's context, waits for the task to return,
// and makes every later Start a no-op. It returns true on its first call
// and false on every later one (each of which still waits for the task).
func (b *Base) Stop() bool {
	b.mu.Lock()
	first := !b.stopped
	b.stopped = true
	if b.running {
		b.cancel()
	}
	b.mu.Unlock()
	b.wg.Wait()
	return first
}

// Wait waits for the running task, if any, to return, without stopping it.
func (b *Base) Wait() { b.wg.Wait() }

// Jitter returns d plus a random duration in [0, d/div]: periodic work of
// many processes spreads out instead of arriving at once.
func Jitter(d time.Duration, div int64) time.Duration {
	if d <= 0 || div <= 0 {
		return max(d, 0)
	}
	return d + time.Duration(rand.Int64N(int64(d)/div+1))
}

// Wait waits for d or for ctx to end, whichever comes first, and reports
// whether the whole d passed.
func Wait(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// Every lets something through (a log line of a failing loop) at most once
// per its period. The zero value lets everything through; it is not safe
// for concurrent use: each loop has its own.
type Every struct {
	period time.Duration
	last   time.Time
}

// NewEvery returns an Every of period.
func NewEvery(period time.Duration) Every { return Every{period: period} }

// Allow reports whether a period has passed since the last time it returned
// true (or whether it never did), and if so starts a new period at now.
func (e *Every) Allow(now time.Time) bool {
	if !e.last.IsZero() && now.Sub(e.last) < e.period {
		return false
	}
	e.last = now
	return true
}

// Signal is a typed test signal. Production code calls Send at a point a
// test waits for; until a test calls Init, Send does nothing (one atomic
// load). The zero value is ready.
type Signal[T any] struct {
	ch atomic.Pointer[chan T]
}

// Init makes later Sends deliver, up to buffer values that no one has
// received yet; a Send beyond that blocks, so a test must receive what it
// asked for. Tests call it before the code under test can Send.
func (s *Signal[T]) Init(buffer int) {
	ch := make(chan T, buffer)
	s.ch.Store(&ch)
}

// Send delivers v to the test that called Init; without Init it does
// nothing.
func (s *Signal[T]) Send(v T) {
	if ch := s.ch.Load(); ch != nil {
		*ch <- v
	}
}

// Wait returns the next value sent, or false when ctx ends first (at once
// without Init: nothing will be sent).
func (s *Signal[T]) Wait(ctx context.Context) (T, bool) {
	var zero T
	ch := s.ch.Load()
	if ch == nil {
		return zero, false
	}
	select {
	case v := <-*ch:
		return v, true
	case <-ctx.Done():
		return zero, false
	}
}
