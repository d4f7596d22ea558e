package persist

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
)

// columnTimeLayout is how a time travels to and from both databases: UTC
// wall-clock time with exactly six fractional digits. It is the text
// SQLAlchemy stores in SQLite DATETIME columns (ADK Python), and its fixed
// width makes text order equal time order there.
const columnTimeLayout = "2006-01-02 15:04:05.000000"

// formatTime formats t for a timestamp column: UTC, truncated to microseconds.
func formatTime(t time.Time) string {
	return t.UTC().Format(columnTimeLayout)
}

// readTimeLayouts are the text forms a timestamp column may hold: ours and
// SQLAlchemy's first, then ISO 8601 forms with or without an offset.
var readTimeLayouts = []string{
	"2006-01-02 15:04:05.999999999",
	"2006-01-02T15:04:05.999999999",
	"2006-01-02 15:04:05.999999999Z07:00",
	time.RFC3339Nano,
}

// The times adksession serves lie within [MinTimestampMicros,
// MaxTimestampMicros) microseconds since the epoch: 1970-01-01 to
// 2200-01-01 UTC (service.MinTimestampMicros and MaxTimestampMicros are
// these). Their microseconds are exact in a double, the number of Lua and
// of Redis sorted-set scores, with room to move an event 1µs after the
// previous one.
const (
	MinTimestampMicros int64 = 0
	MaxTimestampMicros int64 = 7_258_118_400_000_000
)

var (
	minColumnTime  = time.UnixMicro(MinTimestampMicros).UTC()
	lastColumnTime = time.UnixMicro(MaxTimestampMicros - 1).UTC()
)

// clampTime brings a time read from the database into the range
// adksession serves: before 1970 reads as 1970-01-01 00:00:00 UTC, from
// 2200 on as the last microsecond before 2200; out tells which end (-1,
// +1) or none (0). ADK writes what its callers give (ADK Python takes
// timestamp=1e10, year 2286), and a row outside the range would make its
// session unreadable (no script holds its microseconds exactly). The clamp
// is per value, so every read of a row gives the same time, and monotone
// (docs/persistence.md, "Timestamps").
func clampTime(t time.Time) (_ time.Time, out int8) {
	switch {
	case t.Before(minColumnTime):
		return minColumnTime, -1
	case t.After(lastColumnTime):
		return lastColumnTime, 1
	}
	return t, 0
}

// clampBand is how far into the range the events of a session that lie
// beyond one of its ends are spread (eventTime): 2^32 µs, 71 minutes.
const clampBand = 1 << 32

// eventTime is the time of the events row of seq whose timestamp column d
// holds. An event beyond an end of the range reads seq µs from that end,
// inside it: the first microseconds of 1970 for those before it, the last
// 71 minutes before 2200 for those after, so that such events keep their
// order (seqs are consecutive, in time order) instead of sharing one time
// (Redis orders events of one time by another key). Seq is the row's place
// in its session, so every read of a row gives the same time.
func (d dbTime) eventTime(seq int64) time.Time {
	seq = min(max(seq, 1), clampBand-1)
	switch d.out {
	case -1:
		return time.UnixMicro(MinTimestampMicros + seq - 1).UTC()
	case 1:
		return time.UnixMicro(MaxTimestampMicros - clampBand + seq).UTC()
	}
	return d.t
}

// dbTime scans a timestamp column into a UTC time within the range
// adksession serves (clampTime). It accepts what the drivers return for
// the column types ADK creates: a time.Time (Postgres timestamp and
// timestamptz; SQLite DATETIME text that the driver parsed), text in one
// of readTimeLayouts, or a number of epoch seconds (which ADK Python's
// PreciseTimestamp also accepts). Text without an offset is UTC.
type dbTime struct {
	t   time.Time
	out int8 // the row's time was before the range (-1), beyond it (1), or in it (0)
}

// nullTime is a timestamp column that may be NULL.
type nullTime struct {
	t     time.Time
	valid bool
}

// Scan implements sql.Scanner.
func (n *nullTime) Scan(v any) error {
	if v == nil {
		*n = nullTime{}
		return nil
	}
	var d dbTime
	if err := d.Scan(v); err != nil {
		return err
	}
	*n = nullTime{t: d.t, valid: true}
	return nil
}

// Scan implements sql.Scanner.
func (d *dbTime) Scan(v any) error {
	switch v := v.(type) {
	case time.Time:
		d.t, d.out = clampTime(v.UTC())
	case string:
		return d.parse(v)
	case []byte:
		return d.parse(string(v))
	case int64:
		return d.Scan(float64(v))
	case float64:
		// Clamped before the conversion: int64(v*1e6) of a larger v is
		// undefined.
		us := math.Round(v * 1e6)
		d.out = 0
		switch {
		case math.IsNaN(us):
			return fmt.Errorf("scan timestamp: %v is not a time", v)
		case us < float64(MinTimestampMicros):
			us, d.out = float64(MinTimestampMicros), -1
		case us >= float64(MaxTimestampMicros):
			us, d.out = float64(MaxTimestampMicros-1), 1
		}
		d.t = time.UnixMicro(int64(us)).UTC()
	default:
		return fmt.Errorf("scan timestamp: unsupported type %T", v)
	}
	return nil
}

func (d *dbTime) parse(s string) error {
	s = strings.TrimSpace(s)
	for _, layout := range readTimeLayouts {
		if t, err := time.Parse(layout, s); err == nil {
			d.t, d.out = clampTime(t.UTC())
			return nil
		}
	}
	if f, err := strconv.ParseFloat(s, 64); err == nil {
		return d.Scan(f)
	}
	return fmt.Errorf("scan timestamp: cannot parse %q", s)
}
