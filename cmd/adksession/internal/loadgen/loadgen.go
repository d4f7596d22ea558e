// Package loadgen is the load generator of `adksession bench`: S sessions
// × E events appended at concurrency C with a payload of P bytes, through
// the library or over HTTP, then windowed and full reads. It measures
// client-side latency; the caller adds what it knows of Redis and the
// flusher.
package loadgen

import (
	"context"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/adksession/adksession/service"
)

// Target is what the load is driven through.
type Target interface {
	// Create creates session sid of (app, user).
	Create(ctx context.Context, app, user, sid string) (Session, error)
	// Get reads a session with its newest numRecent events (0: all) and
	// returns how many events it got.
	Get(ctx context.Context, app, user, sid string, numRecent int) (int, error)
}

// Session appends to one session. Calls on one Session never overlap.
type Session interface {
	Append(ctx context.Context, ev *service.Event) error
}

// Config is one run.
type Config struct {
	App          string // app name of every session (default "bench")
	RunID        string // makes session ids unique (default: the start time)
	Sessions     int    // S
	Events       int    // E per session
	Concurrency  int    // C appenders
	PayloadBytes int    // P: text bytes in each event
	WindowEvents int    // events a windowed Get asks for (default 10)
	GetSamples   int    // sessions read by the Get phase (default min(S, 200))
	// Progress is called after every append with the number done so far,
	// from the appending goroutines.
	Progress func(done int64)
	// AppendPhase, when set, is called just before the first append
	// (started true) and just after the last (false): the caller reads
	// what the server did for the appends alone.
	AppendPhase func(started bool)
}

// Result is what a run measured.
type Result struct {
	Appends        int64
	Elapsed        time.Duration // of the append phase
	AppendsPerSec  float64
	AppendP50      time.Duration
	AppendP99      time.Duration
	WindowP50      time.Duration
	WindowP99      time.Duration
	FullP50        time.Duration
	FullP99        time.Duration
	WindowEvents   int   // events a windowed Get asked for
	FullEvents     int   // events a full Get returned
	EventJSONBytes int   // JSON size of one event as appended
	SessionIDs     []Ref // the sessions written
}

// Ref names a session.
type Ref struct{ App, User, ID string }

func (c *Config) defaults() error {
	if c.App == "" {
		c.App = "bench"
	}
	if c.RunID == "" {
		c.RunID = time.Now().UTC().Format("20060102T150405.000")
	}
	if c.Sessions <= 0 || c.Events <= 0 || c.Concurrency <= 0 || c.PayloadBytes < 0 {
		return fmt.Errorf("loadgen: sessions, events and concurrency must be positive, payload not negative")
	}
	if c.WindowEvents <= 0 {
		c.WindowEvents = 10
	}
	if c.GetSamples <= 0 {
		c.GetSamples = min(c.Sessions, 200)
	}
	return nil
}

// Event is the j-th event of a session, the event of the append benchmarks:
// P bytes of text and a state delta that sets a session key, a user: key and
// a temp: key, with a new invocation every 5 events.
func Event(j, payload int) *service.Event {
	text := strings.Repeat("x", payload)
	return &service.Event{
		InvocationID: fmt.Sprintf("inv-%d", j/5),
		Author:       "bench",
		Content:      []byte(`{"role":"model","parts":[{"text":"` + text + `"}]}`),
		Actions:      service.EventActions{StateDelta: map[string]any{"counter": j, "user:last": j, "temp:step": j % 5}},
	}
}

// Run creates the sessions, appends S×E events and reads them back.
func Run(ctx context.Context, t Target, cfg Config) (*Result, error) {
	if err := cfg.defaults(); err != nil {
		return nil, err
	}
	res := &Result{SessionIDs: make([]Ref, cfg.Sessions), WindowEvents: cfg.WindowEvents}
	sessions := make([]Session, cfg.Sessions)
	for i := range sessions {
		ref := Ref{cfg.App, fmt.Sprintf("user-%d", i%max(1, cfg.Sessions/4)), fmt.Sprintf("bench-%s-%d", cfg.RunID, i)}
		s, err := t.Create(ctx, ref.App, ref.User, ref.ID)
		if err != nil {
			return nil, fmt.Errorf("create session %s: %w", ref.ID, err)
		}
		sessions[i], res.SessionIDs[i] = s, ref
	}
	if b, err := Event(0, cfg.PayloadBytes).MarshalJSON(); err == nil {
		res.EventJSONBytes = len(b)
	}

	if cfg.AppendPhase != nil {
		cfg.AppendPhase(true)
	}
	lat, elapsed, err := appendAll(ctx, sessions, cfg)
	if cfg.AppendPhase != nil {
		cfg.AppendPhase(false)
	}
	if err != nil {
		return nil, err
	}
	res.Appends, res.Elapsed = int64(len(lat)), elapsed
	res.AppendsPerSec = float64(len(lat)) / elapsed.Seconds()
	res.AppendP50, res.AppendP99 = percentile(lat, 50), percentile(lat, 99)

	var window, full []time.Duration
	for i := 0; i < cfg.GetSamples; i++ {
		ref := res.SessionIDs[i*cfg.Sessions/cfg.GetSamples]
		start := time.Now()
		if _, err := t.Get(ctx, ref.App, ref.User, ref.ID, cfg.WindowEvents); err != nil {
			return nil, fmt.Errorf("windowed get %s: %w", ref.ID, err)
		}
		window = append(window, time.Since(start))
		start = time.Now()
		n, err := t.Get(ctx, ref.App, ref.User, ref.ID, 0)
		if err != nil {
			return nil, fmt.Errorf("full get %s: %w", ref.ID, err)
		}
		full = append(full, time.Since(start))
		res.FullEvents = n
	}
	res.WindowP50, res.WindowP99 = percentile(window, 50), percentile(window, 99)
	res.FullP50, res.FullP99 = percentile(full, 50), percentile(full, 99)
	return res, nil
}

// appendAll appends E events to each session, round robin over the
// sessions, with C workers; one session is appended to by one worker at a
// time, its events in order.
func appendAll(ctx context.Context, sessions []Session, cfg Config) ([]time.Duration, time.Duration, error) {
	jobs := make(chan int) // a session to append its next event to
	locks := make([]sync.Mutex, len(sessions))
	next := make([]int, len(sessions))
	var done atomic.Int64
	var firstErr error
	var errOnce sync.Once
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	lats := make([][]time.Duration, cfg.Concurrency)
	var wg sync.WaitGroup
	start := time.Now()
	for w := range cfg.Concurrency {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for s := range jobs {
				locks[s].Lock()
				j := next[s]
				next[s]++
				ev := Event(j, cfg.PayloadBytes)
				t0 := time.Now()
				err := sessions[s].Append(ctx, ev)
				d := time.Since(t0)
				locks[s].Unlock()
				if err != nil {
					errOnce.Do(func() { firstErr = fmt.Errorf("append event %d to session %d: %w", j, s, err); cancel() })
					continue
				}
				lats[w] = append(lats[w], d)
				n := done.Add(1)
				if cfg.Progress != nil {
					cfg.Progress(n)
				}
			}
		}()
	}
feed:
	for range cfg.Events {
		for s := range sessions {
			select {
			case jobs <- s:
			case <-ctx.Done():
				break feed
			}
		}
	}
	close(jobs)
	wg.Wait()
	elapsed := time.Since(start)
	if firstErr != nil {
		return nil, 0, firstErr
	}
	if err := ctx.Err(); err != nil {
		return nil, 0, err
	}
	return slices.Concat(lats...), elapsed, nil
}

// percentile is the p-th percentile (nearest rank) of ds.
func percentile(ds []time.Duration, p float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	i := int(math.Ceil(p/100*float64(len(s)))) - 1
	return s[max(0, min(i, len(s)-1))]
}
