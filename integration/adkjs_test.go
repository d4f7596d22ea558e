package integration

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/adksession/adksession/integration/testenv"
	"github.com/adksession/adksession/service"
)

// adkJSDir is integration/adkjs with its npm packages installed (ADK JS
// 2.0.0 and MikroORM, pinned by package-lock.json). node and npm missing
// skip the test, except in CI (CI=true), where .ci/run installs them.
func adkJSDir(t *testing.T) string {
	t.Helper()
	for _, tool := range []string{"node", "npm"} {
		if _, err := exec.LookPath(tool); err != nil {
			if os.Getenv("CI") == "true" {
				t.Fatalf("%s is not installed although CI=true: .ci/run installs nodejs and npm", tool)
			}
			t.Skipf("%s is not installed: this test runs ADK JS itself (install nodejs and npm to run it; CI does)", tool)
		}
	}
	dir, err := filepath.Abs("adkjs")
	require.NoError(t, err)
	adkJSInstall.Do(func() { adkJSErr = npmCI(dir) })
	require.NoError(t, adkJSErr)
	return dir
}

var (
	adkJSInstall sync.Once
	adkJSErr     error
)

// npmCI runs `npm ci` in dir unless node_modules was installed from the
// same package.json and package-lock.json (a stamp in node_modules holds
// their hash), so the packages are fetched once per worktree and lock
// file. Test processes installing at once take turns (flock on the lock
// file).
func npmCI(dir string) error {
	lock, err := os.Open(filepath.Join(dir, "package-lock.json"))
	if err != nil {
		return err
	}
	defer lock.Close()
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		return err
	}
	h := sha256.New()
	for _, f := range []string{"package.json", "package-lock.json"} {
		b, err := os.ReadFile(filepath.Join(dir, f))
		if err != nil {
			return err
		}
		h.Write(b)
	}
	sum := hex.EncodeToString(h.Sum(nil))
	stamp := filepath.Join(dir, "node_modules", ".adksession-installed")
	if b, err := os.ReadFile(stamp); err == nil && string(b) == sum {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "npm", "ci", "--no-audit", "--no-fund", "--loglevel=error")
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err != nil {
		return &exec.Error{Name: "npm ci in " + dir + ": " + string(out), Err: err}
	}
	return os.WriteFile(stamp, []byte(sum), 0o644)
}

// jsSession is what integration/adkjs/compaction.mjs prints of a session:
// ADK JS's getSession answer and what ADK JS's own functions say of its
// events.
type jsSession struct {
	Session struct {
		ID     string           `json:"id"`
		State  map[string]any   `json:"state"`
		Events []map[string]any `json:"events"`
	} `json:"session"`
	Compacted  []bool   `json:"compacted"`
	Scratchpad []bool   `json:"scratchpad"`
	Active     []string `json:"active"`
}

// runADKJS runs compaction.mjs with args (database URL, app, user, the
// session to read, the session to write).
func runADKJS(t *testing.T, dir string, args ...string) (written, read jsSession) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "node", append([]string{"compaction.mjs"}, args...)...)
	cmd.Dir = dir
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	require.NoError(t, err, "node compaction.mjs: %s", stderr.String())
	var got struct{ Written, Read jsSession }
	require.NoError(t, json.Unmarshal(out, &got), "%s", out)
	return got.Written, got.Read
}

// eventIDs are the ids of events in order.
func eventIDs(events []map[string]any) []string {
	ids := make([]string, len(events))
	for i, e := range events {
		ids[i], _ = e["id"].(string)
	}
	return ids
}

// TestADKJSCompaction: ADK JS 2.0.0's own DatabaseSessionService reads the
// compaction events adksession wrote (ADK JS's CompactedEvent at the top
// level of event_data, ADK Python's actions.compaction) as its own, and the
// compacted events ADK JS writes are served by adksession's cold path,
// continued, and read back by ADK JS unchanged; a fork of adksession's
// session reads in ADK JS as the session did up to the fork point.
func TestADKJSCompaction(t *testing.T) {
	t.Parallel()
	dir := adkJSDir(t)
	ctx := wbCtx(t)
	dbURL := testenv.FreshDatabase(t)
	e := newWB(t, testenv.RedisURL(t), dbURL, nil)
	const app, user = "adkjs", "u"

	// adksession writes, ADK JS reads.
	sess := e.create(e.svc, app, user, "ours", nil)
	base := time.Now().UTC().Truncate(time.Millisecond)
	at := func(i int) time.Time { return base.Add(time.Duration(i) * 10 * time.Millisecond) }
	text := func(role, s string) json.RawMessage {
		return json.RawMessage(`{"role":"` + role + `","parts":[{"text":"` + s + `"}]}`)
	}
	raw := func(v any) json.RawMessage { b, _ := json.Marshal(v); return b }
	num := func(v any) string { return string(raw(v)) }
	ms := func(t time.Time) float64 { return float64(t.UnixMilli()) }
	pyCompaction := `{"startTimestamp":` + num(float64(at(1).UnixMicro())/1e6) + `,"endTimestamp":` +
		num(float64(at(2).UnixMicro())/1e6) + `,"compactedContent":{"parts":[{"text":"python summary"}],"role":"model"}}`
	ours := []*service.Event{
		{InvocationID: "inv-1", Author: "user", Timestamp: at(1), Content: text("user", "question")},
		{InvocationID: "inv-1", Author: "agent", Timestamp: at(2), Content: text("model", "answer"),
			Actions: service.EventActions{StateDelta: map[string]any{"phase": "answered"}}},
		{InvocationID: "inv-2", Author: "user", Timestamp: at(3), Actions: service.EventActions{Compaction: json.RawMessage(pyCompaction)}},
		{InvocationID: "inv-2", Author: "system", Timestamp: at(4), Content: text("model", "js summary"), Extra: map[string]json.RawMessage{
			"isCompacted": raw(true), "startTime": raw(ms(at(1))), "endTime": raw(ms(at(2))),
			"compactedContent": raw("js summary"), "isScratchpad": raw(true)}},
		{InvocationID: "inv-3", Author: "agent", Timestamp: at(5), Content: text("model", "after")},
	}
	var ourIDs []string
	for _, ev := range ours {
		require.NoError(t, e.svc.AppendEvent(ctx, sess, ev))
		ourIDs = append(ourIDs, ev.ID)
	}
	e.flush(e.svc)

	// The rows: ADK JS's fields at the top level, snake_case; ADK Python's
	// in actions; nothing in custom_metadata.
	rows := readDB(t, e.db).Events[sessKey{app, user, "ours"}]
	require.Len(t, rows, len(ours))
	js := rows[3].Data
	require.Equal(t, []any{true, ms(at(1)), ms(at(2)), "js summary", true},
		[]any{js["is_compacted"], js["start_time"], js["end_time"], js["compacted_content"], js["is_scratchpad"]}, rows[3].Raw)
	require.NotContains(t, js, "custom_metadata", rows[3].Raw)
	require.JSONEq(t, `{"start_timestamp":`+num(float64(at(1).UnixMicro())/1e6)+`,"end_timestamp":`+
		num(float64(at(2).UnixMicro())/1e6)+`,"compacted_content":{"parts":[{"text":"python summary"}],"role":"model"}}`,
		string(raw(rows[2].Data["actions"].(map[string]any)["compaction"])))
	require.NotContains(t, rows[2].Data, "custom_metadata", rows[2].Raw)

	written, read := runADKJS(t, dir, dbURL, app, user, "ours", "theirs")
	require.Equal(t, ourIDs, eventIDs(read.Session.Events))
	require.Equal(t, "answered", read.Session.State["phase"])
	require.Equal(t, []bool{false, false, false, true, false}, read.Compacted, "ADK JS's isCompactedEvent")
	require.Equal(t, []bool{false, false, false, true, false}, read.Scratchpad, "ADK JS's isScratchpadEvent")
	require.Equal(t, []string{ourIDs[3], ourIDs[2], ourIDs[4]}, read.Active,
		"ADK JS's getActiveEvents: the latest compacted event, then the events after its endTime")
	jsEv := read.Session.Events[3]
	require.Equal(t, []any{true, ms(at(1)), ms(at(2)), "js summary", true, ms(at(4))},
		[]any{jsEv["isCompacted"], jsEv["startTime"], jsEv["endTime"], jsEv["compactedContent"], jsEv["isScratchpad"], jsEv["timestamp"]})
	require.NotContains(t, jsEv, "customMetadata")
	require.JSONEq(t, pyCompaction, string(raw(read.Session.Events[2]["actions"].(map[string]any)["compaction"])),
		"ADK JS reads ADK Python's compaction in camelCase")

	// A fork of our session before its last invocation: ADK JS reads it as
	// it read the session up to there, compactions included, with the
	// state the session had there.
	_, err := e.svc.Fork(ctx, &service.ForkRequest{AppName: app, UserID: user, SessionID: "ours", NewSessionID: "forked",
		BeforeInvocationID: "inv-3"})
	require.NoError(t, err)
	e.flush(e.svc)
	_, forked := runADKJS(t, dir, dbURL, app, user, "forked")
	require.Equal(t, ourIDs[:4], eventIDs(forked.Session.Events))
	for i := range 4 {
		require.Equal(t, read.Session.Events[i], forked.Session.Events[i], "forked event %d as ADK JS reads it", i)
	}
	require.Equal(t, "answered", forked.Session.State["phase"])
	require.Equal(t, read.Compacted[:4], forked.Compacted)
	require.Equal(t, read.Scratchpad[:4], forked.Scratchpad)
	require.Equal(t, []string{ourIDs[3], ourIDs[2]}, forked.Active, "ADK JS's getActiveEvents of the fork")

	// ADK JS writes, adksession reads (cold: the session is only in the
	// database) and gives every field back as ADK JS answers it.
	require.Len(t, written.Session.Events, 5)
	require.Equal(t, []bool{false, false, true, true, false}, written.Compacted)
	require.Equal(t, []bool{false, false, false, true, false}, written.Scratchpad)
	theirRows := readDB(t, e.db).Events[sessKey{app, user, "theirs"}]
	require.Len(t, theirRows, 5)
	for _, k := range []string{"is_compacted", "start_time", "end_time", "compacted_content"} {
		require.Contains(t, theirRows[2].Data, k, "ADK JS writes its CompactedEvent at the top level: %s", theirRows[2].Raw)
	}
	got, err := e.svc.Get(ctx, &service.GetRequest{AppName: app, UserID: user, SessionID: "theirs"})
	require.NoError(t, err)
	require.Equal(t, "answered", stateMap(got.Session)["phase"])
	require.Equal(t, 5, got.Session.Events().Len())
	for i, want := range written.Session.Events {
		ev := got.Session.Events().At(i)
		require.Equal(t, want["timestamp"], ms(ev.Timestamp), "event %d", i)
		b, err := json.Marshal(ev)
		require.NoError(t, err)
		var api map[string]any
		require.NoError(t, json.Unmarshal(b, &api))
		delete(api, "timestamp") // seconds in the API form, milliseconds in ADK JS's
		wantNoTime := map[string]any{}
		for k, v := range want {
			if k != "timestamp" {
				wantNoTime[k] = v
			}
		}
		require.Equal(t, wantNoTime, api, "event %d: adksession answers what ADK JS answers", i)
	}
	cold := got.Session.Events().At(2)
	require.Equal(t, map[string]string{"isCompacted": "true", "startTime": num(written.Session.Events[0]["timestamp"]),
		"endTime": num(written.Session.Events[1]["timestamp"]), "compactedContent": `"summary of two"`},
		map[string]string{"isCompacted": string(cold.Extra["isCompacted"]), "startTime": string(cold.Extra["startTime"]),
			"endTime": string(cold.Extra["endTime"]), "compactedContent": string(cold.Extra["compactedContent"])})

	// adksession continues ADK JS's session; ADK JS's rows stay as ADK JS
	// wrote them, and ADK JS reads the whole session back.
	next := &service.Event{InvocationID: "inv-go", Author: "agent", Content: text("model", "from adksession")}
	require.NoError(t, e.svc.AppendEvent(ctx, got.Session, next))
	e.flush(e.svc)
	after := readDB(t, e.db).Events[sessKey{app, user, "theirs"}]
	require.Len(t, after, 6)
	for i := range theirRows {
		require.Equal(t, theirRows[i].Data, after[i].Data, "ADK JS's row %d", i)
	}
	_, again := runADKJS(t, dir, dbURL, app, user, "theirs")
	require.Equal(t, append(eventIDs(written.Session.Events), next.ID), eventIDs(again.Session.Events))
	require.Equal(t, append(written.Compacted, false), again.Compacted)
	require.Equal(t, append(written.Scratchpad, false), again.Scratchpad)
	w := written.Session.Events
	require.Equal(t, []string{w[3]["id"].(string), w[4]["id"].(string), next.ID}, again.Active,
		"ADK JS's getActiveEvents: its scratchpad, then the events after its endTime")
	for i, want := range written.Session.Events {
		require.Equal(t, want, again.Session.Events[i], "event %d as ADK JS reads it", i)
	}

	// The compacted view of ADK JS's rows, Redis holding only the newest
	// two events: the walk over Postgres's indexes (migration 006, which are
	// over event_data and so cover the rows ADK JS wrote) gives the view of
	// the whole history, whether or not ADK JS's init() left them.
	var left string
	require.NoError(t, e.db.QueryRowContext(ctx, `SELECT coalesce(string_agg(indexname, ' ' ORDER BY indexname), '')
FROM pg_indexes WHERE tablename = 'events' AND indexname LIKE 'adksession\_%'`).Scan(&left))
	t.Logf("adksession's indexes after ADK JS's init(): %q", left)
	cfg := e.cfg
	cfg.MaxCachedEvents, cfg.DisableFlusher = 2, true
	reader := e.open(cfg)
	whole, err := reader.Get(ctx, &service.GetRequest{AppName: app, UserID: user, SessionID: "theirs"})
	require.NoError(t, err)
	want := eventsJSON(t, service.CompactedView(eventsOf(whole.Session)))
	require.Less(t, len(want), whole.Session.Events().Len(), "the view drops events")
	k := e.sessionKeys(app, user, "theirs")
	require.NoError(t, e.rdb.Del(ctx, k.Session, k.Events, k.Undo, k.Temp).Err())
	view, err := reader.Get(ctx, &service.GetRequest{AppName: app, UserID: user, SessionID: "theirs", Compacted: true})
	require.NoError(t, err)
	require.Equal(t, want, eventsJSON(t, eventsOf(view.Session)), "the cold view of ADK JS's rows")
}
