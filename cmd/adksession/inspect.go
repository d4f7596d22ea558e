package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/adksession/adksession/cache"
	"github.com/adksession/adksession/service"
)

const inspectAbout = `Shows one session: its state by scope (app, user, session, and temp with --invocation), a
window of its events, and its flush status: the last revision in Redis (m:rev) against the last
one in the database (m:fl). As a table, or JSON with --json.`

// inspection is what inspect shows (and writes with --json).
type inspection struct {
	AppName        string                    `json:"appName"`
	UserID         string                    `json:"userId"`
	ID             string                    `json:"id"`
	LastUpdateTime time.Time                 `json:"lastUpdateTime"`
	State          map[string]map[string]any `json:"state"` // scope -> key (without prefix) -> value
	Events         []*service.Event          `json:"events"`
	Flush          flushStatus               `json:"flush"`
}

// flushStatus compares what Redis holds with what the database has.
type flushStatus struct {
	Cached       bool  `json:"cached"`
	Revision     int64 `json:"revision"`     // m:rev: seq of the last event
	Flushed      int64 `json:"flushed"`      // m:fl: seq of the last event in the database
	Pending      int64 `json:"pending"`      // events not yet in the database
	FirstCached  int64 `json:"firstCached"`  // seq of the oldest event Redis holds
	CachedEvents int   `json:"cachedEvents"` // events Redis holds
}

func runInspect(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var f storeFlags
	fs := newFlagSet("inspect", "[flags] APP USER SESSION", inspectAbout, stderr)
	f.register(fs)
	numRecent := fs.Int("num-recent", 0, "show only the newest `N` events (0: all)")
	after := fs.String("after", "", "show only events at or after `TIME` (RFC 3339, or epoch seconds)")
	invocation := fs.String("invocation", "", "include the temp: state of this running invocation `ID`")
	asJSON := fs.Bool("json", false, "write JSON instead of a table")
	if err := parse(fs, args); err != nil {
		return err
	}
	if fs.NArg() != 3 {
		fs.Usage()
		return errUsage
	}
	f.resolve()
	req := &service.GetRequest{AppName: fs.Arg(0), UserID: fs.Arg(1), SessionID: fs.Arg(2), NumRecentEvents: *numRecent, InvocationID: *invocation}
	if *after != "" {
		t, err := parseTime(*after)
		if err != nil {
			return err
		}
		req.After = t
	}
	svc, err := openService(ctx, f.config())
	if err != nil {
		return err
	}
	defer svc.Close(context.Background())
	in, err := inspect(ctx, svc, f, req)
	if err != nil {
		return err
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(in)
	}
	return in.writeTable(stdout)
}

func parseTime(s string) (time.Time, error) {
	if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
		return t, nil
	}
	sec, err := strconv.ParseFloat(s, 64)
	if err != nil {
		return time.Time{}, fmt.Errorf("--after %q: want RFC 3339 or epoch seconds", s)
	}
	return time.UnixMicro(int64(sec * 1e6)).UTC(), nil
}

// inspect reads the session through the service and its flush status from
// the cache.
func inspect(ctx context.Context, svc *service.Service, f storeFlags, req *service.GetRequest) (*inspection, error) {
	resp, err := svc.Get(ctx, req)
	if err != nil {
		return nil, err
	}
	s := resp.Session
	in := &inspection{
		AppName: s.AppName(), UserID: s.UserID(), ID: s.ID(), LastUpdateTime: s.LastUpdateTime(),
		State:  map[string]map[string]any{"app": {}, "user": {}, "session": {}, "temp": {}},
		Events: slices.Collect(s.Events().All()),
	}
	for k, v := range s.State().All() {
		scope, key := scopeOf(k)
		in.State[scope][key] = v
	}
	rdb, err := cache.NewClient(f.redisURL)
	if err != nil {
		return nil, err
	}
	defer rdb.Close()
	keys, err := cache.NewKeys(f.namespace, f.shards)
	if err != nil {
		return nil, err
	}
	snap, err := cache.NewStore(rdb, cache.Options{Keys: keys}).Get(ctx, cache.GetArgs{App: req.AppName, User: req.UserID, SID: req.SessionID, After: -1, NumRecent: 0})
	switch {
	case errors.Is(err, cache.ErrNotCached), errors.Is(err, cache.ErrDeleted):
	case err != nil:
		return nil, fmt.Errorf("read flush status: %w", err)
	default:
		in.Flush = flushStatus{Cached: true, Revision: snap.Rev, Flushed: snap.Flushed, Pending: snap.Rev - snap.Flushed,
			FirstCached: snap.First, CachedEvents: len(snap.Events)}
	}
	return in, nil
}

// scopeOf splits a merged state key into its scope and bare key.
func scopeOf(k string) (scope, key string) {
	for _, p := range []string{service.AppPrefix, service.UserPrefix, service.TempPrefix} {
		if rest, ok := strings.CutPrefix(k, p); ok {
			if p == service.TempPrefix {
				return "temp", k
			}
			return strings.TrimSuffix(p, ":"), rest
		}
	}
	return "session", k
}

func (in *inspection) writeTable(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "session\t%s / %s / %s\n", in.AppName, in.UserID, in.ID)
	fmt.Fprintf(tw, "last update\t%s\n", in.LastUpdateTime.Format(time.RFC3339Nano))
	fl := in.Flush
	if fl.Cached {
		fmt.Fprintf(tw, "flush\trevision %d, flushed %d, pending %d; Redis holds %d events from seq %d\n", fl.Revision, fl.Flushed, fl.Pending, fl.CachedEvents, fl.FirstCached)
	} else {
		fmt.Fprintf(tw, "flush\tnot cached in Redis (read from the database)\n")
	}
	fmt.Fprintln(tw, "\nSTATE\nscope\tkey\tvalue")
	for _, scope := range []string{"app", "user", "session", "temp"} {
		m := in.State[scope]
		for _, k := range slices.Sorted(maps.Keys(m)) {
			fmt.Fprintf(tw, "%s\t%s\t%s\n", scope, k, clip(jsonText(m[k]), 80))
		}
	}
	fmt.Fprintf(tw, "\nEVENTS (%d)\n#\ttime\tinvocation\tauthor\tcontent\tstate delta\n", len(in.Events))
	for i, ev := range in.Events {
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\n", i+1, ev.Timestamp.Format("2006-01-02 15:04:05.000000"), ev.InvocationID, ev.Author,
			clip(contentText(ev.Content), 60), clip(strings.Join(slices.Sorted(maps.Keys(ev.Actions.StateDelta)), ","), 40))
	}
	return tw.Flush()
}

func jsonText(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprint(v)
	}
	return string(b)
}

// contentText is the text of a content's parts, or a short form of calls.
func contentText(raw json.RawMessage) string {
	var c struct {
		Parts []struct {
			Text         string `json:"text"`
			FunctionCall *struct {
				Name string `json:"name"`
			} `json:"functionCall"`
			FunctionResponse *struct {
				Name string `json:"name"`
			} `json:"functionResponse"`
		} `json:"parts"`
	}
	if len(raw) == 0 || json.Unmarshal(raw, &c) != nil {
		return ""
	}
	var out []string
	for _, p := range c.Parts {
		switch {
		case p.Text != "":
			out = append(out, p.Text)
		case p.FunctionCall != nil:
			out = append(out, "call "+p.FunctionCall.Name)
		case p.FunctionResponse != nil:
			out = append(out, "response "+p.FunctionResponse.Name)
		}
	}
	return strings.Join(out, " ")
}

// clip shortens s to n runes on one line.
func clip(s string, n int) string {
	s = strings.ReplaceAll(s, "\n", " ")
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	return string(r[:n-1]) + "…"
}
