package sim

// Comparisons with the model: events, windows, user state; and the
// checkpoint, where every client has stopped and everything is compared
// exactly: every session in Redis, the lists, the user states, and every
// row in Postgres once flushed.

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/adksession/adksession/persist"
	"github.com/adksession/adksession/service"
)

// expectConflict records that the flush dead-letters event id of k as a
// conflict (storedOverDB).
func (d *driver) expectConflict(k sessKey, id string) {
	d.conflictMu.Lock()
	defer d.conflictMu.Unlock()
	if d.conflicts == nil {
		d.conflicts = map[sessKey]map[string]bool{}
	}
	if d.conflicts[k] == nil {
		d.conflicts[k] = map[string]bool{}
	}
	d.conflicts[k][id] = true
}

// conflicted: an event of k is expected to be dead-lettered as a conflict
// (expectConflict), not yet taken by a checkpoint.
func (d *driver) conflicted(k sessKey) bool {
	d.conflictMu.Lock()
	defer d.conflictMu.Unlock()
	return len(d.conflicts[k]) > 0
}

// takeConflicts, after a complete flush, drops the dead letters of the
// conflicts expected (expectConflict: an event stored under an id the
// database holds for another, which the database keeps) and fails on any
// other letter. A conflict letter is not retried (RetryDeadLetter refuses
// it): checked here too.
func (d *driver) takeConflicts(ctx context.Context) error {
	svc := d.e.svcs[0]
	var shards []service.ShardDeadLetters
	err := faultRetry(ctx, func() (err error) {
		shards, err = svc.DeadLetters(ctx, service.MaxDeadLettersListed)
		return err
	})
	if err != nil {
		return fmt.Errorf("list dead letters: %w", err)
	}
	d.conflictMu.Lock()
	defer d.conflictMu.Unlock()
	for _, sh := range shards {
		for _, l := range sh.Letters {
			k := sessKey{App: l.AppName, User: l.UserID, SID: l.SessionID}
			var rec struct {
				EventID string `json:"event_id"`
			}
			_ = json.Unmarshal([]byte(l.Entry), &rec)
			id := rec.EventID
			want := fmt.Sprintf("event %s of session %s/%s/%s: %s", id, k.App, k.User, k.SID, persist.ReasonReusedID)
			if !l.Conflict || l.Unit != "event" || l.Reason != want || !d.conflicts[k][id] {
				return fmt.Errorf("after a flush: dead letter %s (%s) of %v: %s, want none but the conflicts of events stored again under an id the database holds",
					l.ID, l.Unit, k, l.Reason)
			}
			if err := svc.RetryDeadLetter(ctx, sh.Shard, l.Entry); !errors.Is(err, service.ErrInvalidArgument) {
				return fmt.Errorf("retry of the conflict letter of %s of %v: %v, want it refused", id, k, err)
			}
			err := faultRetry(ctx, func() error { return svc.DropDeadLetter(ctx, sh.Shard, l.Entry) })
			if err != nil && !errors.Is(err, service.ErrNotFound) { // not found: a first attempt's reply was lost
				return fmt.Errorf("drop the conflict letter of %s of %v: %w", id, k, err)
			}
			delete(d.conflicts[k], id)
			d.hist.add("  conflict dead-lettered (the database keeps its own event): %s of %v, dropped", id, k)
		}
	}
	return nil
}

func stateOf(s *service.Session) map[string]any {
	out := map[string]any{}
	for k, v := range s.State().All() {
		out[k] = jsonRound(v)
	}
	return out
}

func eventsOf(s *service.Session) []*service.Event { return slices.Collect(s.Events().All()) }

// jsonEqual compares two contents as JSON values. Bytes compare as bytes:
// an event read back from the database answers them in the URL-safe
// alphabet, as stored there (docs/persistence.md, "Bytes"), while Redis
// answers them as they were sent.
func jsonEqual(a, b json.RawMessage) bool {
	if len(bytes.TrimSpace(a)) == 0 || len(bytes.TrimSpace(b)) == 0 {
		return len(bytes.TrimSpace(a)) == len(bytes.TrimSpace(b)) || string(bytes.TrimSpace(a)) == "null" || string(bytes.TrimSpace(b)) == "null"
	}
	var x, y any
	if json.Unmarshal(a, &x) != nil || json.Unmarshal(b, &y) != nil {
		return false
	}
	return reflect.DeepEqual(normBytes(x), normBytes(y))
}

// normBytes rewrites the base64 of inline data in the standard alphabet.
func normBytes(v any) any {
	return walkJSON(v, func(k string, val any) (string, any, bool) {
		if s, ok := val.(string); ok && k == "data" {
			for _, enc := range []*base64.Encoding{base64.StdEncoding, base64.URLEncoding, base64.RawStdEncoding, base64.RawURLEncoding} {
				if b, err := enc.DecodeString(s); err == nil {
					return k, base64.StdEncoding.EncodeToString(b), false
				}
			}
		}
		return k, val, true
	})
}

// walkJSON rebuilds a decoded JSON value, each object member as f says:
// its new key and value, and whether to walk into the value.
func walkJSON(v any, f func(key string, val any) (string, any, bool)) any {
	switch x := v.(type) {
	case map[string]any:
		out := map[string]any{}
		for k, val := range x {
			k, val, deeper := f(k, val)
			if deeper {
				val = walkJSON(val, f)
			}
			out[k] = val
		}
		return out
	case []any:
		out := make([]any, len(x))
		for i := range x {
			out[i] = walkJSON(x[i], f)
		}
		return out
	}
	return v
}

// diffEvent compares an event read back with the model's.
func diffEvent(w *mEvent, g *service.Event) []string {
	var d []string
	if g.ID != w.ID || g.InvocationID != w.Inv || g.Author != w.Author {
		d = append(d, fmt.Sprintf("event id/invocation/author %q/%q/%q, want %q/%q/%q", g.ID, g.InvocationID, g.Author, w.ID, w.Inv, w.Author))
	}
	if ts := g.Timestamp.UnixMicro(); ts != w.Ts {
		d = append(d, fmt.Sprintf("event %s timestamp %d, want %d", w.ID, ts, w.Ts))
	}
	if !jsonEqual(g.Content, w.Content) {
		d = append(d, fmt.Sprintf("event %s content %s, want %s", w.ID, g.Content, w.Content))
	}
	if got := jsonRound(nonNil(g.Actions.StateDelta)); !reflect.DeepEqual(got, jsonRound(nonNil(w.Delta))) {
		d = append(d, fmt.Sprintf("event %s stateDelta %s, want %s", w.ID, js(got), js(w.Delta)))
	}
	if !reflect.DeepEqual(nonNil(g.Actions.ArtifactDelta), nonNil(w.Artifacts)) {
		d = append(d, fmt.Sprintf("event %s artifactDelta %s, want %s", w.ID, js(g.Actions.ArtifactDelta), js(w.Artifacts)))
	}
	if g.Actions.RewindBeforeInvocationID != w.RewindBefore || g.Partial {
		d = append(d, fmt.Sprintf("event %s rewindBefore %q partial %v, want %q", w.ID, g.Actions.RewindBeforeInvocationID, g.Partial, w.RewindBefore))
	}
	return d
}

// window is what Get returns of evs with NumRecentEvents n and After (µs, -1: none).
func window(evs []*mEvent, n int, after int64) []*mEvent {
	var out []*mEvent
	for _, e := range evs {
		if after < 0 || e.Ts >= after {
			out = append(out, e)
		}
	}
	if n > 0 && len(out) > n {
		out = out[len(out)-n:]
	}
	return out
}

func checkEvents(evs []*mEvent, got *service.Session, n int, after int64) []string {
	want := window(evs, n, after)
	g := eventsOf(got)
	if len(g) != len(want) {
		ids := make([]string, len(g))
		for i, e := range g {
			ids[i] = e.ID
		}
		wids := make([]string, len(want))
		for i, e := range want {
			wids[i] = e.ID
		}
		return []string{fmt.Sprintf("%d events %q, want %d %q", len(g), ids, len(want), wids)}
	}
	var d []string
	for i := range want {
		d = append(d, diffEvent(want[i], g[i])...)
	}
	return d
}

// readDiff compares a read of session k (window n, after; temp state of
// inv) with the model: with any of the event lists it may answer
// (mSession.views), events, state and update time. It returns the lists it
// matched (a window of recent events may match both; nil and the
// differences from the database's when none).
func (m *Model) readDiff(k sessKey, s *mSession, got *service.Session, n int, after int64, me int, owned bool, inv string) ([]string, [][]*mEvent) {
	var first []string
	var matched [][]*mEvent
	for i, evs := range s.views() {
		diffs := checkEvents(evs, got, n, after)
		diffs = append(diffs, m.stateDiffOf(k, evs, stateOf(got), me, owned, inv)...)
		if lu, want := got.LastUpdateTime().UnixMicro(), s.as(evs).updateTime(); !s.as(evs).updatedAt(lu) {
			diffs = append(diffs, fmt.Sprintf("LastUpdateTime %d, want %d", lu, want))
		}
		switch {
		case len(diffs) == 0:
			matched = append(matched, evs)
		case i == 0:
			first = diffs
		default:
			first = append(first, fmt.Sprintf("(nor Redis's older copy: %s)", strings.Join(diffs, "; ")))
		}
	}
	if matched != nil {
		return nil, matched
	}
	return first, nil
}

// readRev is the numbering a handle read as the views matched follows: the
// fewest events. A read that matches Redis's older copy and the database's
// events alike (a window of recent events both end with) may have come from
// either; at the copy's numbering the handle is current to the copy and
// stale to the database (alternatives allows both), as one that appended
// to the copy is (adoptAppend). Standalone single seed 12266057155, op
// #299: held at the database's numbering after a read of the copy, the
// handle was taken as current once the ADK writer's flush had let the copy
// go.
func readRev(matched [][]*mEvent) int64 {
	rev := int64(len(matched[0]))
	for _, evs := range matched[1:] {
		rev = min(rev, int64(len(evs)))
	}
	return rev
}

// userStateDiff compares GetUserState (keys without "user:") with the model.
func (m *Model) userStateDiff(uk userKey, got map[string]any, me int) []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	want := m.Users[uk]
	var diffs []string
	for _, k := range sortedKeys(want, got) {
		w, wok := want[k]
		g, gok := got[k]
		g = jsonRound(g)
		if gok && wok && reflect.DeepEqual(g, w) {
			continue
		}
		if m.looseValue("user/"+uk.App+"/"+uk.User+"/"+k, g, gok) {
			continue
		}
		if me >= 0 && ownerOf(userPrefix+k) != me {
			ok := !gok
			for _, v := range m.Written["user/"+uk.App+"/"+uk.User+"/"+k] {
				ok = ok || reflect.DeepEqual(v, g)
			}
			if ok {
				continue
			}
		}
		diffs = append(diffs, fmt.Sprintf("%q: %s (present %v), want %s (present %v)", k, js(g), gok, js(w), wok))
	}
	return diffs
}

// ---------------------------------------------------------------------------
// Checkpoints.

// checkpoint compares everything with the model; every client is stopped and
// has settled its operations, and no fault is running.
func (d *driver) checkpoint(round int) {
	rng := rand.New(rand.NewPCG(uint64(d.seed), uint64(round)+1000))
	d.hist.add("checkpoint %d", round)
	d.pgStart()
	if err := d.e.waitRedis(time.Minute); err != nil {
		d.failf("checkpoint %d: %v", round, err)
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	if d.snap != nil && d.snap.whole() && d.sh.Clients > 1 {
		// The RDB snapshot (or the held replica) the last checkpoint took:
		// Redis goes back to it with a round's writes acknowledged since,
		// part of them flushed.
		if err := d.regress(ctx, true); err != nil {
			d.failf("checkpoint %d: %v", round, err)
			return
		}
	}
	if err := d.e.flush(ctx); err != nil {
		d.failf("checkpoint %d: flush: %v", round, err)
		return
	}
	d.m.flushed()
	if err := d.takeConflicts(ctx); err != nil {
		d.failf("checkpoint %d: %v", round, err)
		return
	}
	if b, err := d.e.svcs[0].Backlog(ctx); err != nil || b.Entries != 0 || b.Dead != 0 {
		d.failf("checkpoint %d: after a flush: backlog %+v (%v), want none and no dead letters", round, b, err)
		return
	}
	for _, f := range []func(context.Context, *rand.Rand) []string{d.checkShared, d.checkSessions, d.checkLists, d.checkDB} {
		if diffs := f(ctx, rng); len(diffs) > 0 {
			d.failf("checkpoint %d: %s", round, strings.Join(diffs, "\n  "))
			return
		}
	}
	if err := d.converge(ctx); err != nil {
		d.failf("checkpoint %d: %v", round, err)
		return
	}
	if d.sh.Clients > 1 && d.sh.Faults && d.sh.Behind && d.snap == nil && rng.IntN(3) == 0 {
		// The next checkpoint restarts Redis from this snapshot, or fails
		// over to this replica.
		mode := "rdb"
		if d.e.cluster != nil {
			mode = "hold"
		}
		if err := d.takeSnapshot(ctx, mode, 0); err != nil {
			d.failf("checkpoint %d: %v", round, err)
			return
		}
	}
	if d.sh.Clients > 1 && d.sh.Faults && rng.IntN(3) == 0 {
		// FLUSHALL after a flush: the next round reads everything back from Postgres.
		d.m.allTempLost()
		if err := d.e.flushAll(ctx); err != nil {
			d.failf("checkpoint %d: FLUSHALL: %v", round, err)
			return
		}
		d.m.allCopiesGone()
		d.hist.add("  fault: FLUSHALL after the checkpoint")
	}
	d.hist.add("checkpoint %d passed", round)
}

// checkShared reads every shared session and checks the properties
// concurrent appends keep: every acknowledged event once, each client's in
// its order, timestamps increasing; then orders the model's events as stored.
func (d *driver) checkShared(ctx context.Context, rng *rand.Rand) []string {
	var diffs []string
	for k := range d.shared {
		resp, err := d.e.svcs[rng.IntN(len(d.e.svcs))].Get(ctx, &service.GetRequest{AppName: k.App, UserID: k.User, SessionID: k.SID})
		if err != nil {
			diffs = append(diffs, fmt.Sprintf("shared %v: %v", k, err))
			continue
		}
		got := eventsOf(resp.Session)
		if s := d.m.session(k); s.Behind {
			// Redis may hold an older copy: the events of one of the lists
			// the session may answer, as stored (the order of concurrent
			// appends is the database's).
			if df, _ := d.m.readDiff(k, s, resp.Session, 0, -1, -1, true, ""); len(df) > 0 {
				diffs = append(diffs, fmt.Sprintf("shared %v: %s", k, strings.Join(df, "; ")))
			}
			continue
		}
		d.m.mu.Lock()
		s := d.m.Sessions[k]
		byID := map[string]*mEvent{}
		for _, e := range s.Events {
			byID[e.ID] = e
		}
		if len(got) != len(s.Events) {
			diffs = append(diffs, fmt.Sprintf("shared %v: %d events stored, %d acknowledged", k, len(got), len(s.Events)))
		}
		var ordered []*mEvent
		lastOf := map[int]int{} // client -> position of its last event in the acknowledged order
		pos := map[string]int{}
		for i, e := range s.Events {
			pos[e.ID] = i
		}
		var prevTs int64
		for i, g := range got {
			w := byID[g.ID]
			if w == nil {
				diffs = append(diffs, fmt.Sprintf("shared %v: event %q stored, never acknowledged", k, g.ID))
				continue
			}
			delete(byID, g.ID)
			diffs = append(diffs, diffEvent(w, g)...)
			if p, ok := lastOf[w.Client]; ok && pos[g.ID] < p {
				diffs = append(diffs, fmt.Sprintf("shared %v: client %d's events stored out of their order at %q", k, w.Client, g.ID))
			}
			lastOf[w.Client] = pos[g.ID]
			ts := g.Timestamp.UnixMicro()
			if i > 0 && ts <= prevTs {
				diffs = append(diffs, fmt.Sprintf("shared %v: event %q at %d not after %d", k, g.ID, ts, prevTs))
			}
			if df := s.sharedStamp(w, ts, prevTs, i == 0); df != "" {
				diffs = append(diffs, fmt.Sprintf("shared %v: %s", k, df))
			}
			prevTs = ts
			ordered = append(ordered, w)
		}
		for id := range byID {
			diffs = append(diffs, fmt.Sprintf("shared %v: acknowledged event %q missing", k, id))
		}
		if len(diffs) == 0 {
			s.Events = ordered
		}
		d.m.mu.Unlock()
	}
	return diffs
}

// allKeys lists every slot's session key (live or not) and the shared ones.
func (d *driver) allKeys() []sessKey {
	var out []sessKey
	for _, c := range d.clients {
		for _, sl := range c.slots {
			out = append(out, sl.key)
		}
	}
	for k := range d.shared {
		out = append(out, k)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].String() < out[j].String() })
	return out
}

// checkSessions reads every session in full, in windows and with its temp
// state, through a random service.
func (d *driver) checkSessions(ctx context.Context, rng *rand.Rand) []string {
	var diffs []string
	for _, k := range d.allKeys() {
		svc := d.e.svcs[rng.IntN(len(d.e.svcs))]
		s := d.m.session(k)
		resp, err := svc.Get(ctx, &service.GetRequest{AppName: k.App, UserID: k.User, SessionID: k.SID})
		switch {
		case s == nil && errors.Is(err, service.ErrNotFound):
			continue
		case s == nil:
			diffs = append(diffs, fmt.Sprintf("%v: deleted, read %v", k, err))
			continue
		case err != nil:
			diffs = append(diffs, fmt.Sprintf("%v: %v", k, err))
			continue
		}
		if df, _ := d.m.readDiff(k, s, resp.Session, 0, -1, -1, true, ""); len(df) > 0 {
			diffs = append(diffs, fmt.Sprintf("%v: %s", k, strings.Join(df, "; ")))
			d.dump(k)
		}
		// Windows reaching past the cached tail, and the temp state.
		n, mode := 1+rng.IntN(8), rng.IntN(5)
		after := afterBound(s.Events, mode, rng.IntN(1<<20))
		req := &service.GetRequest{AppName: k.App, UserID: k.User, SessionID: k.SID, NumRecentEvents: n, InvocationID: s.TInv}
		if after >= 0 {
			req.After = time.UnixMicro(after).UTC()
		}
		if resp, err = svc.Get(ctx, req); err != nil {
			diffs = append(diffs, fmt.Sprintf("%v window: %v", k, err))
			continue
		}
		if df, _ := d.m.readDiff(k, s, resp.Session, n, after, -1, true, s.TInv); len(df) > 0 {
			diffs = append(diffs, fmt.Sprintf("%v window n=%d after=%d with invocation %q: %s", k, n, after, s.TInv, strings.Join(df, "; ")))
		}
	}
	return diffs
}

// checkLists walks every user's and app's listing and reads every user state.
func (d *driver) checkLists(ctx context.Context, rng *rand.Rand) []string {
	var diffs []string
	c := &client{d: d, id: -1, all: true} // at a checkpoint every session must read exactly
	for a := range d.sh.Apps {
		app := appName(a)
		users := []string{""}
		for u := range d.sh.Users {
			users = append(users, userName(u))
		}
		for _, user := range users {
			var listed []*service.Session
			token := ""
			for {
				resp, err := d.e.svcs[rng.IntN(len(d.e.svcs))].List(ctx, &service.ListRequest{AppName: app, UserID: user, PageSize: 1 + rng.IntN(4), PageToken: token})
				if err != nil {
					return append(diffs, fmt.Sprintf("list %q %q: %v", app, user, err))
				}
				listed = append(listed, resp.Sessions...)
				if token = resp.NextPageToken; token == "" {
					break
				}
			}
			for _, df := range c.checkList(app, user, listed) {
				diffs = append(diffs, fmt.Sprintf("list %q %q: %s (listed: %s)", app, user, df, listedString(listed)))
			}
			if user == "" {
				continue
			}
			got, err := d.e.svcs[rng.IntN(len(d.e.svcs))].GetUserState(ctx, &service.UserStateRequest{AppName: app, UserID: user})
			if err != nil {
				return append(diffs, fmt.Sprintf("user state %q %q: %v", app, user, err))
			}
			for _, df := range d.m.userStateDiff(userKey{app, user}, got, -1) {
				diffs = append(diffs, fmt.Sprintf("user state %q %q: %s", app, user, df))
			}
		}
	}
	return diffs
}
