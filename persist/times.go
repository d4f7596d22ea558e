package persist

import (
	"fmt"
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

// dbTime scans a timestamp column into a UTC time. It accepts what the
// drivers return for the column types ADK creates: a time.Time (Postgres
// timestamp and timestamptz; SQLite DATETIME text that the driver parsed),
// text in one of readTimeLayouts, or a number of epoch seconds (which ADK
// Python's PreciseTimestamp also accepts). Text without an offset is UTC.
type dbTime struct{ t time.Time }

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
		d.t = v.UTC()
	case string:
		return d.parse(v)
	case []byte:
		return d.parse(string(v))
	case int64:
		d.t = time.Unix(v, 0).UTC()
	case float64:
		d.t = time.UnixMicro(int64(v * 1e6)).UTC()
	default:
		return fmt.Errorf("scan timestamp: unsupported type %T", v)
	}
	return nil
}

func (d *dbTime) parse(s string) error {
	s = strings.TrimSpace(s)
	for _, layout := range readTimeLayouts {
		if t, err := time.Parse(layout, s); err == nil {
			d.t = t.UTC()
			return nil
		}
	}
	if f, err := strconv.ParseFloat(s, 64); err == nil {
		return d.Scan(f)
	}
	return fmt.Errorf("scan timestamp: cannot parse %q", s)
}
