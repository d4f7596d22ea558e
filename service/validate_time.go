package service

import (
	"fmt"
	"time"

	"github.com/adksession/adksession/persist"
)

// An event's timestamp is within [MinTimestampMicros, MaxTimestampMicros)
// microseconds since the epoch: from 1970-01-01 to 2200-01-01 UTC. These
// microseconds (below 7.3e15) are exact in a double, the number of Lua and
// of Redis sorted-set scores (exact up to 2^53, about 9e15), with room to
// move an event 1µs after the previous one. A time read from the database
// is brought into the same range (docs/persistence.md, "Timestamps").
const (
	MinTimestampMicros = persist.MinTimestampMicros
	MaxTimestampMicros = persist.MaxTimestampMicros
)

var minTimestamp, maxTimestamp = time.UnixMicro(MinTimestampMicros).UTC(), time.UnixMicro(MaxTimestampMicros).UTC()

// checkTimestamp refuses a timestamp outside the range.
func checkTimestamp(field string, t time.Time) error {
	if t.Before(minTimestamp) || !t.Before(maxTimestamp) {
		return fmt.Errorf("%w: %s: %s is outside [%s, %s) UTC", ErrInvalidArgument, field,
			t.UTC().Format(time.RFC3339Nano), minTimestamp.Format(time.DateOnly), maxTimestamp.Format(time.DateOnly))
	}
	return nil
}

// windowBound is the µs score of Get's After. A bound outside the range is
// clamped, not refused (no event lies outside it, so the answer is the one
// asked for): before it lets every event through, beyond it none (2^53 µs is
// beyond any stored event and still exact in a double).
func windowBound(after time.Time) int64 {
	const beyond = 1 << 53
	switch {
	case after.Before(minTimestamp):
		return MinTimestampMicros
	case after.After(time.UnixMicro(beyond)):
		return beyond
	}
	return after.UnixMicro()
}

// maxCount is the largest count a script holds exactly (2^53, Lua's
// MAX_INT): no session has more events, no session's update time more µs.
const maxCount = 1 << 53

// windowSize is the NumRecent a Get sends for NumRecentEvents n: negative
// is refused; a window beyond maxCount is clamped to all events (0), the
// answer asked for, since no session holds that many.
func windowSize(n int) (int, error) {
	switch {
	case n < 0:
		return 0, fmt.Errorf("%w: NumRecentEvents: %d is negative", ErrInvalidArgument, n)
	case int64(n) > maxCount:
		return 0, nil
	}
	return n, nil
}

// checkIfLastUpdate refuses an AppendToRequest.IfLastUpdate that no
// session's update time can be: before 1970, or from 2^53 µs on (year
// 2255; the scripts hold update times below it).
func checkIfLastUpdate(t time.Time) error {
	if t.IsZero() {
		return nil
	}
	if us := t.UnixMicro(); t.Before(minTimestamp) || us >= maxCount {
		return fmt.Errorf("%w: IfLastUpdate: %s is no session's update time (outside [%s, 2^53 µs))", ErrInvalidArgument,
			t.UTC().Format(time.RFC3339Nano), minTimestamp.Format(time.DateOnly))
	}
	return nil
}
