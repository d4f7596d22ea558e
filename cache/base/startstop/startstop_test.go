package startstop

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

type ctxKey struct{}

// TestBase: one task at a time; its context keeps the starter's values but
// not its cancellation; Stop cancels it, waits for it and refuses later
// Starts; a task that returned by itself lets another start.
func TestBase(t *testing.T) {
	var b Base
	parent, cancelParent := context.WithCancel(context.WithValue(context.Background(), ctxKey{}, "v"))
	entered, release := make(chan context.Context, 1), make(chan struct{})
	require.True(t, b.Start(parent, func(ctx context.Context) {
		entered <- ctx
		<-release
	}))
	ctx := <-entered
	require.Equal(t, "v", ctx.Value(ctxKey{}), "the task's context carries the starter's values")
	require.False(t, b.Start(parent, func(context.Context) { t.Error("a second task ran while the first runs") }))
	cancelParent()
	require.NoError(t, ctx.Err(), "the starter's cancellation ended the task")
	close(release)
	b.Wait()

	// The task returned by itself: another may start, and Stop ends it.
	var stopped context.Context
	require.True(t, b.Start(context.Background(), func(ctx context.Context) {
		<-ctx.Done()
		stopped = ctx
	}))
	require.True(t, b.Stop(), "the first Stop")
	require.Error(t, stopped.Err(), "Stop returned before its task did") // the race detector checks the read
	require.False(t, b.Stop(), "a second Stop")
	require.False(t, b.Start(context.Background(), func(context.Context) { t.Error("a task ran after Stop") }))
}

// TestStopConcurrent: Stops from many goroutines each wait for the task;
// exactly one is the first.
func TestStopConcurrent(t *testing.T) {
	var b Base
	var done bool
	require.True(t, b.Start(context.Background(), func(ctx context.Context) {
		<-ctx.Done()
		time.Sleep(10 * time.Millisecond) // a task slow to return: every Stop must wait for it
		done = true
	}))
	var wg sync.WaitGroup
	firsts := make(chan bool, 8)
	for range 8 {
		wg.Go(func() {
			first := b.Stop()
			if !done {
				t.Error("Stop returned before the task did")
			}
			firsts <- first
		})
	}
	wg.Wait()
	close(firsts)
	n := 0
	for f := range firsts {
		if f {
			n++
		}
	}
	require.Equal(t, 1, n, "Stops that were first")
}

func TestJitter(t *testing.T) {
	for range 1000 {
		d := Jitter(time.Second, 10)
		require.GreaterOrEqual(t, d, time.Second)
		require.LessOrEqual(t, d, time.Second+100*time.Millisecond)
	}
	require.Equal(t, time.Duration(0), Jitter(-time.Second, 10))
	require.Equal(t, time.Second, Jitter(time.Second, 0))
}

func TestWait(t *testing.T) {
	require.True(t, Wait(context.Background(), time.Millisecond))
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	require.False(t, Wait(ctx, time.Hour))
}

func TestEvery(t *testing.T) {
	e := NewEvery(time.Minute)
	now := time.Unix(1000, 0)
	require.True(t, e.Allow(now), "the first")
	require.False(t, e.Allow(now.Add(59*time.Second)))
	require.True(t, e.Allow(now.Add(time.Minute)))
	require.False(t, e.Allow(now.Add(time.Minute+time.Second)), "the period starts again at the last allowed")
	var zero Every
	require.True(t, zero.Allow(now))
	require.True(t, zero.Allow(now), "the zero value lets everything through")
}

func TestSignal(t *testing.T) {
	var s Signal[int]
	s.Send(1) // without Init: nothing, and no block
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	short, cancelShort := context.WithCancel(ctx)
	cancelShort()
	_, ok := s.Wait(short)
	require.False(t, ok)

	s.Init(2)
	go func() { s.Send(2); s.Send(3); s.Send(4) }()
	for _, want := range []int{2, 3, 4} {
		got, ok := s.Wait(ctx)
		require.True(t, ok)
		require.Equal(t, want, got)
	}
	_, ok = s.Wait(short)
	require.False(t, ok, "nothing more was sent")
}
