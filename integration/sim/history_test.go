package sim

// The history of a run: every operation and its result, in order, kept in
// memory (the newest historyLines lines) and written to a text file when the
// run fails, or always with -sim.keep.

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"
)

const historyLines = 200_000

type history struct {
	mu      sync.Mutex
	header  []string
	lines   []string // ring buffer
	next    int
	full    bool
	dropped int64
	start   time.Time
}

func newHistory(header ...string) *history {
	return &history{header: header, lines: make([]string, 0, 1024), start: time.Now()}
}

// add records one line, prefixed with the time since the start.
func (h *history) add(format string, args ...any) {
	line := fmt.Sprintf("%9.3fs ", time.Since(h.start).Seconds()) + fmt.Sprintf(format, args...)
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.full && len(h.lines) < historyLines {
		h.lines = append(h.lines, line)
		return
	}
	h.full = true
	h.lines[h.next] = line
	h.next = (h.next + 1) % historyLines
	h.dropped++
}

// tail returns the last n lines.
func (h *history) tail(n int) []string {
	all := h.all()
	if len(all) > n {
		all = all[len(all)-n:]
	}
	return all
}

func (h *history) all() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.full {
		return append([]string(nil), h.lines...)
	}
	return append(append([]string(nil), h.lines[h.next:]...), h.lines[:h.next]...)
}

// write writes the history to dir/name and returns the path.
func (h *history) write(dir, name string) (string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	var b strings.Builder
	for _, l := range h.header {
		b.WriteString(l + "\n")
	}
	h.mu.Lock()
	if h.dropped > 0 {
		fmt.Fprintf(&b, "(%d older lines dropped)\n", h.dropped)
	}
	h.mu.Unlock()
	for _, l := range h.all() {
		b.WriteString(l + "\n")
	}
	path := filepath.Join(dir, name)
	return path, os.WriteFile(path, []byte(b.String()), 0o644)
}
