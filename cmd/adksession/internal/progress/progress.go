// Package progress draws the progress bars of adksession's commands (flush,
// prune, bench) on a terminal line.
package progress

import (
	"fmt"
	"io"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Bar draws a progress bar on a terminal line, at most 5 times a second
// until the total is reached, and once more when done.
type Bar struct {
	w      io.Writer
	label  string
	total  int64
	n      atomic.Int64
	start  time.Time
	stop   chan struct{}
	closed sync.WaitGroup
}

// New starts a bar labelled label that counts up to total on w.
func New(w io.Writer, label string, total int64) *Bar {
	p := &Bar{w: w, label: label, total: total, start: time.Now(), stop: make(chan struct{})}
	p.closed.Add(1)
	go func() {
		defer p.closed.Done()
		t := time.NewTicker(200 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-t.C:
				if p.n.Load() < p.total {
					p.draw()
				}
			case <-p.stop:
				p.draw()
				fmt.Fprintln(p.w)
				return
			}
		}
	}()
	return p
}

// Set records how much is done; safe for concurrent use.
func (p *Bar) Set(n int64) { p.n.Store(n) }

// Done draws the last state and ends the line.
func (p *Bar) Done() {
	close(p.stop)
	p.closed.Wait()
}

func (p *Bar) draw() {
	const width = 30
	n := p.n.Load()
	frac := 1.0
	if p.total > 0 {
		frac = min(1, float64(n)/float64(p.total))
	}
	full := int(frac * width)
	rate := float64(n) / time.Since(p.start).Seconds()
	fmt.Fprintf(p.w, "\r%s [%s%s] %3.0f%% %d/%d %.0f/s ", p.label, strings.Repeat("#", full), strings.Repeat(".", width-full), 100*frac, n, p.total, rate)
}
