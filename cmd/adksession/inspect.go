package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/adksession/adksession/service"
)

const inspectAbout = `Shows one session: its flush status (the last revision in Redis, m:rev, against the last
one in the database, m:fl; its shard's backlog, lag and dead letters), its sizes (events in Redis
and in all, MEMORY USAGE of its keys), its state by scope (app, user, session, and temp with
--invocation) and a window of its events. As tables, or JSON with --json.`

// inspection is what inspect shows (and writes with --json).
type inspection struct {
	AppName        string                    `json:"appName"`
	UserID         string                    `json:"userId"`
	ID             string                    `json:"id"`
	LastUpdateTime time.Time                 `json:"lastUpdateTime"`
	State          map[string]map[string]any `json:"state"`     // scope -> key (without prefix) -> value
	StateKeys      map[string]int            `json:"stateKeys"` // scope -> number of keys
	Events         []*service.Event          `json:"events"`
	Flush          flushStatus               `json:"flush"`
	Sizes          sizes                     `json:"sizes"`
}

// flushStatus compares what Redis holds with what the database has.
type flushStatus struct {
	Cached           bool    `json:"cached"`           // Redis held the session before inspect read it
	Database         bool    `json:"database"`         // a database backs Redis
	Revision         int64   `json:"revision"`         // m:rev: seq of the last event
	Flushed          int64   `json:"flushed"`          // m:fl: seq of the last event in the database
	Pending          int64   `json:"pending"`          // events not yet in the database
	Shard            int     `json:"shard"`            // the session's shard
	ShardBacklog     int64   `json:"shardBacklog"`     // entries of the shard's change log
	ShardLagSeconds  float64 `json:"shardLagSeconds"`  // age of its oldest entry
	ShardDeadLetters int64   `json:"shardDeadLetters"` // its dead letters
}

// sizes are the session's events and the memory of its keys.
type sizes struct {
	CachedEvents    int64            `json:"cachedEvents"`    // events Redis holds
	FirstCached     int64            `json:"firstCached"`     // seq of the oldest of them
	TotalEvents     int64            `json:"totalEvents"`     // events of the session (its revision)
	RedisBytes      map[string]int64 `json:"redisBytes"`      // MEMORY USAGE by key kind
	RedisTotalBytes int64            `json:"redisTotalBytes"` // their sum
}

func runInspect(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var f storeFlags
	fs := newFlagSet("inspect", "[flags] APP USER SESSION", inspectAbout, stderr)
	f.register(fs)
	numRecent := fs.Int("num-recent", 0, "show only the newest `N` events (0: all)")
	after := fs.String("after", "", "show only events at or after `TIME` (RFC 3339, or epoch seconds)")
	invocation := fs.String("invocation", "", "include the temp: state of this running invocation `ID`")
	asJSON := fs.Bool("json", false, "write JSON instead of tables")
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
	cfg := f.config()
	cfg.DisableFlusher = true // a look changes nothing
	svc, err := openService(ctx, cfg)
	if err != nil {
		return err
	}
	defer svc.Close(context.Background())
	info, err := svc.Inspect(ctx, req)
	if err != nil {
		return err
	}
	in := newInspection(info)
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(in)
	}
	return in.writeTable(stdout)
}

// newInspection arranges what Service.Inspect answered.
func newInspection(info *service.SessionInfo) *inspection {
	s := info.Session
	in := &inspection{
		AppName: s.AppName(), UserID: s.UserID(), ID: s.ID(), LastUpdateTime: s.LastUpdateTime(),
		State:     map[string]map[string]any{"app": {}, "user": {}, "session": {}, "temp": {}},
		StateKeys: info.StateKeys,
		Events:    slices.Collect(s.Events().All()),
		Flush: flushStatus{Cached: info.WasCached, Database: info.Durable, Revision: info.Revision, Flushed: info.Flushed,
			Pending: info.Pending, Shard: info.Shard, ShardBacklog: info.ShardBacklog, ShardLagSeconds: info.ShardLag.Seconds(),
			ShardDeadLetters: info.ShardDeadLetters},
		Sizes: sizes{CachedEvents: info.CachedEvents, FirstCached: info.FirstCached, TotalEvents: info.Revision,
			RedisBytes: info.RedisBytes, RedisTotalBytes: info.RedisTotal},
	}
	for k, v := range s.State().All() {
		scope, key := scopeOf(k)
		in.State[scope][key] = v
	}
	return in
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
	fl, sz := in.Flush, in.Sizes
	fmt.Fprintf(tw, "session\t%s / %s / %s\n", in.AppName, in.UserID, in.ID)
	fmt.Fprintf(tw, "last update\t%s\n", in.LastUpdateTime.Format(time.RFC3339Nano))
	if fl.Cached {
		fmt.Fprintf(tw, "cached\tyes\n")
	} else {
		fmt.Fprintf(tw, "cached\tno: read from the database now (and put back into Redis)\n")
	}
	if fl.Database {
		fmt.Fprintf(tw, "flush\trevision %d, flushed %d, pending %d\n", fl.Revision, fl.Flushed, fl.Pending)
		fmt.Fprintf(tw, "shard %d\tbacklog %d, lag %s, dead letters %d\n", fl.Shard, fl.ShardBacklog,
			(time.Duration(fl.ShardLagSeconds * float64(time.Second))).Round(time.Millisecond), fl.ShardDeadLetters)
	} else {
		fmt.Fprintf(tw, "flush\trevision %d; no database: Redis is the only copy\n", fl.Revision)
	}
	fmt.Fprintf(tw, "events\t%d in Redis (from seq %d) of %d\n", sz.CachedEvents, sz.FirstCached, sz.TotalEvents)
	var mem []string
	for _, k := range []string{"session", "events", "event ids", "undo", "temp", "user", "user index", "app"} {
		if n, ok := sz.RedisBytes[k]; ok {
			mem = append(mem, k+" "+byteSize(n))
		}
	}
	fmt.Fprintf(tw, "redis memory\t%s: %s\n", byteSize(sz.RedisTotalBytes), strings.Join(mem, ", "))
	k := in.StateKeys
	fmt.Fprintf(tw, "\nSTATE (app %d, user %d, session %d, temp %d keys)\nscope\tkey\tvalue\n", k["app"], k["user"], k["session"], k["temp"])
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
