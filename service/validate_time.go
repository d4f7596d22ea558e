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
