package sim

// Operations on events: append (owned and shared sessions), rewind, end of
// an invocation; and the reads of lists and user state.

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/adksession/adksession/service"
)

// outcome is what the model says an append must answer.
type outcome int

const (
	outAppend   outcome = iota // stored
	outDup                     // the same event is stored already: acknowledged with its timestamp, nothing written
	outExists                  // another event has the id: ErrAlreadyExists
	outStale                   // ErrStaleSession
	outNotFound                // ErrNotFound
)

var outcomeNames = [...]string{"append", "duplicate", "ErrAlreadyExists", "ErrStaleSession", "ErrNotFound"}

var outcomeErrs = [...]error{nil, nil, service.ErrAlreadyExists, service.ErrStaleSession, service.ErrNotFound}

// buildEvent resolves an append's event against the session (nil: absent).
func (c *client) buildEvent(o *op, s *mSession) *service.Event {
	ev := &service.Event{Author: o.Author, Content: o.Content, Extra: maps.Clone(o.Extra),
		Actions: service.EventActions{StateDelta: cloneAny(o.Delta), ArtifactDelta: cloneInt(o.Artifacts)}}
	var evs []*mEvent
	if s != nil {
		evs = s.Events
	}
	switch o.InvMode {
	case 0:
		switch {
		case s != nil && s.TInv != "":
			ev.InvocationID = s.TInv
		case len(evs) > 0:
			ev.InvocationID = evs[len(evs)-1].Inv
		}
	case 2:
		if s != nil {
			if invs := s.invocations(); len(invs) > 0 {
				ev.InvocationID = invs[o.Pick%len(invs)]
			}
		}
	}
	if ev.InvocationID == "" {
		ev.InvocationID = o.NewInv
	}
	if o.TsMode != tsNow {
		ev.Timestamp = time.UnixMicro(o.Ts).UTC()
	}
	var mine []*mEvent // events this client sent (and may send again)
	for _, e := range evs {
		if e.Sent != nil && e.Client == c.id {
			mine = append(mine, e)
		}
	}
	switch o.IDMode {
	case idFresh:
		ev.ID = fmt.Sprintf("ev-c%d-%d", c.id, o.Step)
	case idRetry:
		if len(mine) > 0 {
			return mine[o.Pick%len(mine)].Sent.Clone()
		}
		ev.ID = fmt.Sprintf("ev-c%d-%d", c.id, o.Step)
	case idReuse:
		if len(mine) > 0 {
			ev.ID = mine[o.Pick%len(mine)].ID
		} else if len(evs) > 0 && !c.slotOf(sessKeyOf(o, c)).shared {
			ev.ID = evs[o.Pick%len(evs)].ID
		}
	case idForeign:
		if o.Kind == opShared {
			// Another client may send the same id to the shared session at
			// the same moment: which of the two gets ErrAlreadyExists is a race.
			ev.ID = fmt.Sprintf("ev-c%d-%d", c.id, o.Step)
		} else {
			ev.ID = c.d.pastID(o.Pick)
		}
	}
	return ev
}

func sessKeyOf(o *op, c *client) sessKey {
	if o.Kind == opShared {
		return c.shared[o.Slot%len(c.shared)].key
	}
	return c.slots[o.Slot].key
}

// predict says what appending ev through h must answer (h.s nil: through
// AppendTo, without a handle, to the session as it is now).
func predict(s *mSession, h *handle, ev *service.Event, concurrent bool) (outcome, *mEvent) {
	switch {
	case s == nil:
		return outNotFound, nil
	case h.s == nil:
		concurrent = true
	case s.Inc != h.inc:
		return outStale, nil
	}
	if ev.ID != "" {
		if had := s.event(ev.ID); had != nil {
			if sameEvent(had, ev) {
				return outDup, had
			}
			return outExists, had
		}
	}
	if h.rev < s.rev() && !concurrent {
		return outStale, nil
	}
	return outAppend, nil
}

// sameEvent: the stored event is the one sent, but for its timestamp.
func sameEvent(had *mEvent, ev *service.Event) bool {
	sent := storedForm(ev)
	return had.Inv == sent.Inv && had.Author == sent.Author && jsonEqual(had.Content, sent.Content) &&
		reflect.DeepEqual(had.Delta, sent.Delta) && reflect.DeepEqual(nonNil(had.Artifacts), nonNil(sent.Artifacts)) &&
		had.RewindBefore == ""
}

// storedForm is an event as it is stored: no temp: keys, values as read back.
func storedForm(ev *service.Event) *mEvent {
	delta := map[string]any{}
	for k, v := range ev.Actions.StateDelta {
		if scopeOf(k) != scopeTemp {
			delta[k] = jsonRound(v)
		}
	}
	return &mEvent{ID: ev.ID, Inv: ev.InvocationID, Author: ev.Author, Content: ev.Content, Delta: delta,
		Artifacts: ev.Actions.ArtifactDelta, RewindBefore: ev.Actions.RewindBeforeInvocationID}
}

// pickHandle returns the op's handle of the slot, or reads a fresh one.
func (c *client) pickHandle(o *op, sl *slot) *handle {
	if o.Handle >= 0 && len(sl.handles) > 0 {
		return sl.handles[o.Handle%len(sl.handles)]
	}
	if sl.shared {
		return c.fetchShared(o, sl)
	}
	return c.fetch(o, sl, 3, 0, 0)
}

func (c *client) appendOp(o *op) {
	d := c.d
	sl := c.opSlot(c.slots[o.Slot])
	if sl == nil {
		return
	}
	k := sl.key
	s := d.m.session(k)
	var h *handle
	if o.Handle < 0 && o.Pick%2 == 0 {
		// No handle: AppendTo, to the session as it is now.
		h = &handle{}
		if s != nil {
			h.inc, h.rev = s.Inc, s.rev()
		}
		c.log("without a handle (AppendTo)")
	} else {
		if h = c.pickHandle(o, sl); h == nil {
			return
		}
		s = d.m.session(k)
	}
	ev := c.buildEvent(o, s)
	want, had := predict(s, h, ev, d.e.concurrent(o.Svc))
	if s != nil && s.Behind {
		// Two numberings: the history says which the handle follows.
		c.log("handle at %d; the database holds %d events, Redis's older copy %d", h.rev, s.rev(), len(s.View))
	}
	c.sendAppend(o, sl, h, ev, want, had)
}

// sendAppend appends ev through h and checks the answer against want.
func (c *client) sendAppend(o *op, sl *slot, h *handle, ev *service.Event, want outcome, had *mEvent) {
	d := c.d
	k := sl.key
	d.m.sent(k, ev.Actions.StateDelta)
	sent := ev.Clone()
	ctx, cancel := opCtx()
	defer cancel()
	before := time.Now()
	var err error
	if h.s == nil {
		err = d.e.svcs[o.Svc].AppendTo(ctx, &service.AppendToRequest{AppName: k.App, UserID: k.User, SessionID: k.SID, Event: ev})
	} else {
		err = d.e.svcs[o.Svc].AppendEvent(ctx, h.s, ev)
	}
	if c.faultErr(o, err) {
		c.addPending(&pending{op: o, key: k, kind: o.Kind, h: h, ev: sent, want: want, since: before})
		return
	}
	p, ok := c.answered(o, c.alternatives(k, h, sent, want, had, d.e.concurrent(o.Svc)), err, sent.ID, ev)
	if !ok {
		d.dump(k) // what Redis and the database hold, for the history
		return
	}
	c.record(o, sl, h, p, sent, ev, before)
}

// record takes an allowed answer p to the append of sent through h into
// the model (ev: the event as answered).
func (c *client) record(o *op, sl *slot, h *handle, p pred, sent, ev *service.Event, before time.Time) {
	switch {
	case p.want >= outExists:
		c.log("%s", outcomeNames[p.want])
	case p.want == outDup:
		c.acknowledgedDup(o, h, p.had, ev)
	case p.orDB:
		switch c.d.howHeld(sl.key, ev.ID, p.had) {
		case heldNot:
			// Redis's older copy, which lacks the event the database
			// holds under the id sent, did not store it again: it had the
			// id looked up in the database (append.lua's {-9}: the id is
			// not among the cached events of a copy whose older events are
			// in the database only; docs/design.md, "Ids unknown to an
			// older copy"), and the answer is the database's event.
			// Nothing is written; the copy stays as it was (a read may
			// still answer it), and so does the handle (the service brings
			// a handle along only by an event Redis holds). Standalone
			// single seed 227977846135, op #219: the model took the answer
			// for the copy's new event, and wanted the app listing #222 to
			// show it.
			c.d.dbDup.Add(1)
			c.log("duplicate acknowledged from the database (Redis's older copy lacks it): %s at %d", ev.ID, ev.Timestamp.UnixMicro())
		case heldByDB:
			// Redis holds the event at the database's numbering: the copy
			// was let go (a rebasing flush, then a read that put back the
			// database's session) before the append, and Redis answered
			// the database's event as a duplicate; the service brings the
			// handle along by it, as by any duplicate (standalone single
			// seed 689124091095, #337: a concurrent handle at the copy's 4
			// moved to the database's 8; the model took the answer for the
			// copy's storing the event again, and wanted ErrStaleSession
			// of the handle at #371).
			c.acknowledgedDup(o, h, p.had, ev)
		default:
			c.storedOverDB(o, sl.key, h, sent, ev)
		}
	case p.viewOnly:
		c.storedOverDB(o, sl.key, h, sent, ev)
	default:
		c.adoptAppend(o, sl, h, sent, ev.ID, ev.Timestamp.UnixMicro(), before, true)
	}
}

// redisRev is Redis's revision of session k now (its m:rev), false when
// Redis holds no session hash of it or cannot be read.
func (d *driver) redisRev(k sessKey) (int64, bool) {
	if d.revs != nil {
		return d.revs(k)
	}
	if d.e == nil {
		return 0, false
	}
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	var rev int64
	var found bool
	err := faultRetry(ctx, func() error {
		v, err := d.e.rdb.HGet(ctx, d.e.keys.Session(k.App, k.User, k.SID).Session, "m:rev").Int64()
		found = err == nil
		rev = v
		if errors.Is(err, redis.Nil) {
			err = nil
		}
		return err
	})
	return rev, err == nil && found
}

// held says how Redis holds an event the database holds too, after an
// append of its id answered with the database's id and time.
type held int

const (
	// heldNot: Redis lacks it; its older copy had the id looked up in the
	// database and wrote nothing.
	heldNot held = iota
	// heldAgain: the older copy stored it again.
	heldAgain
	// heldByDB: at the database's numbering, the copy let go of before.
	heldByDB
)

// howHeld tells how Redis holds the event with id in k, the database's
// event had: the answer to the append cannot tell, Redis's event-id index
// can. A copy that stored the event again holds it at the copy's next seq,
// until a rebasing flush lets go of the copy (an event stored again at the
// database's time does not rebase its batch: docs/design.md, "Ids unknown
// to an older copy", not told apart). Where the copy's next seq is the
// database's seq of the event too, it is taken for stored again.
func (d *driver) howHeld(k sessKey, id string, had *mEvent) held {
	in, seq := d.copyHolds(k, id)
	if !in {
		return heldNot
	}
	s := d.m.session(k)
	if s != nil && had != nil && seq != int64(len(s.View))+1 && seq == int64(indexOf(s.Events, had.ID)+1) {
		return heldByDB
	}
	return heldAgain
}

// copyHolds tells whether Redis holds an event with id in k now (its
// event-id index), and at which seq.
func (d *driver) copyHolds(k sessKey, id string) (bool, int64) {
	if d.holds != nil {
		return d.holds(k, id)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	var held bool
	var seq int64
	err := faultRetry(ctx, func() error {
		v, err := d.e.rdb.ZScore(ctx, d.e.keys.Session(k.App, k.User, k.SID).EventIDs, id).Result()
		held, seq = err == nil, int64(v)
		if errors.Is(err, redis.Nil) {
			err = nil
		}
		return err
	})
	if err != nil {
		d.failf("read the event ids of %v from Redis: %v", k, err)
	}
	return held, seq
}

// storedOverDB: an event whose id the database holds, sent again through a
// handle read from Redis's older copy of the session (or without one), was
// stored as a new event by the copy, which lacks it (kept, by decision:
// docs/simulation.md; a handle ahead of the copy is answered the stored
// event): the model follows it, as an event of that copy only. One with
// other content than the database's (idReuse, or an idForeign id the
// database holds for this session too) is dead-lettered at the flush: the
// checkpoint expects its letter (expectConflict).
func (c *client) storedOverDB(o *op, k sessKey, h *handle, sent, ev *service.Event) {
	e := storedForm(sent)
	e.ID, e.Ts, e.Client, e.Sent = ev.ID, ev.Timestamp.UnixMicro(), c.id, sent.Clone()
	_, _, _, temp := split(sent.Actions.StateDelta)
	c.d.m.viewAppended(k, e, temp)
	h.ofCopy = true
	_, user, app, _ := split(e.Delta)
	c.d.m.storedAgain(k, e.Ts, user, app)
	h.rev = int64(len(c.d.m.session(k).View)) // the handle follows the copy it appended to
	c.d.knownDup.Add(1)
	if o.IDMode == idReuse || c.d.m.otherInDB(k, sent) {
		// Another event under the id of one the database holds (a reused
		// id, or another session's that an earlier foreign append gave
		// this one too): the flush keeps the database's and dead-letters
		// this one (a conflict).
		c.d.expectConflict(k, ev.ID)
		h.conflicted = true
	}
	c.log("known (kept): %s, held by the database, stored again by Redis's older copy at %d", ev.ID, e.Ts)
}

// otherInDB: the database's event of k under sent's id is not sent itself
// (another event sent under that id, or one ADK wrote): a copy storing
// sent again makes a conflict at the flush, not a duplicate.
func (m *Model) otherInDB(k sessKey, sent *service.Event) bool {
	s := m.session(k)
	if s == nil {
		return false
	}
	for _, e := range s.Events {
		if e.ID == sent.ID {
			return e.Sent == nil || !reflect.DeepEqual(e.Sent, sent)
		}
	}
	return false
}

// pred is an answer the model allows an append, with the event it names.
type pred struct {
	want outcome
	had  *mEvent
	// viewOnly: stored by Redis's older copy, which lacks the event the
	// database holds under that id (a duplicate delivery): the flush keeps
	// the database's (kept, by decision: docs/simulation.md).
	viewOnly bool
	// orDB: with viewOnly, the answer may also be the database's event,
	// the copy having had the id looked up there and written nothing
	// (Redis tells which: storedAgain).
	orDB bool
}

// alternatives are the answers an append through h may get: the model's
// (want, had), and while Redis may hold an older copy of the session, what
// that copy answers.
func (c *client) alternatives(k sessKey, h *handle, ev *service.Event, want outcome, had *mEvent, concurrent bool) []pred {
	alts := []pred{{want: want, had: had}}
	s := c.d.m.session(k)
	if s != nil && s.Behind {
		w, hd := predict(s.as(s.View), h, ev, concurrent)
		alts = append(alts, pred{want: w, had: hd})
	}
	if h.s != nil && s != nil && s.Inc == h.inc && (s.Behind || h.ofCopy) {
		// The handle may be at the stored revision with another last event
		// (ofCopy), or become so as the copy takes appends: stale.
		alts = append(alts, pred{want: outStale})
	}
	return alts
}

// answered picks the allowed answer that err (nil: stored, or acknowledged
// as the event ev names) is; false (and the run fails) when none is.
func (c *client) answered(o *op, alts []pred, err error, sentID string, ev *service.Event) (pred, bool) {
	var names []string
	for i, p := range alts {
		names = append(names, outcomeNames[p.want])
		switch {
		case p.want >= outExists && errors.Is(err, outcomeErrs[p.want]):
			return p, true
		case err == nil && p.want == outDup && ev.ID == p.had.ID && ev.Timestamp.UnixMicro() == p.had.Ts:
			if i == 0 && slices.ContainsFunc(alts[1:], func(a pred) bool { return a.want == outAppend }) {
				// Redis's older copy lacks the event and would store it
				// again, at the time it asked for when that is after the
				// copy's last event: the answer then looks like the
				// duplicate's (seed 942321632390, op #268). Taken as stored
				// again when the copy holds it: the copy's view holds it,
				// and its keys may read as its values (storedOverDB).
				// Otherwise the copy had the id looked up in the database,
				// whose event this is (seed 227977846135, op #219).
				return pred{want: outAppend, had: p.had, viewOnly: true, orDB: true}, true
			}
			return p, true
		}
	}
	if err == nil {
		for i, p := range alts {
			if p.want == outAppend {
				p.viewOnly = i > 0 && alts[0].want != outAppend && alts[0].want != outStale
				return p, true
			}
		}
		if alts[0].want == outDup {
			return alts[0], true // acknowledgedDup says what differs
		}
	}
	c.failf(o, "append (id %q): %v, want %s", sentID, err, strings.Join(names, " or "))
	return pred{}, false
}

// acknowledgedDup checks the answer to a duplicate delivery: the stored id
// and timestamp, nothing written.
func (c *client) acknowledgedDup(o *op, h *handle, had *mEvent, ev *service.Event) {
	if ev.ID != had.ID || ev.Timestamp.UnixMicro() != had.Ts {
		c.failf(o, "duplicate delivery answered id %q ts %d, want the stored %q ts %d", ev.ID, ev.Timestamp.UnixMicro(), had.ID, had.Ts)
		return
	}
	k := c.keyOfHandle(o)
	if s := c.d.m.session(k); s != nil {
		h.ofCopy = h.ofCopy || s.Behind
		evs, rev := s.Events, s.rev()
		if s.Behind && (slices.Contains(s.View, had) || c.d.copyAnswered(k, s, had)) {
			// Answered by Redis's older copy (its event, its time): the
			// handle follows the copy's numbering, not the database's
			// (cluster concurrent seed 843168760264, #105: moved to the
			// database's, the handle was taken as current at #113, after a
			// rebasing flush had let the copy go).
			evs, rev = s.View, int64(len(s.View))
		}
		switch seq := int64(indexOf(evs, had.ID) + 1); {
		case h.rev == seq-1:
			h.rev = seq // the handle had missed only this event
		case h.rev < seq-1 && c.d.e.concurrent(o.Svc):
			h.rev = rev // caught up, as the answer of the first attempt would have
		}
	}
	c.log("duplicate acknowledged: %s at %d", had.ID, had.Ts)
}

// copyAnswered: the database's event had, which Redis's older copy of k
// holds too at the same time, was answered by the copy: the answer cannot
// tell, Redis's numbering can (its m:rev is the copy's). Standalone
// concurrent seed 613387936541, #72: the duplicate moved the handle to the
// database's numbering, and after a rebasing flush had let the copy go
// the handle was taken as current at #80.
func (d *driver) copyAnswered(k sessKey, s *mSession, had *mEvent) bool {
	i := indexOf(s.View, had.ID)
	if i < 0 || s.View[i].Ts != had.Ts || int64(len(s.View)) == s.rev() {
		return false
	}
	rev, ok := d.redisRev(k)
	return ok && rev == int64(len(s.View))
}

func (c *client) keyOfHandle(o *op) sessKey { return sessKeyOf(o, c) }

func indexOf(evs []*mEvent, id string) int {
	for i, e := range evs {
		if e.ID == id {
			return i
		}
	}
	return -1
}

// adoptAppend records a stored event (acknowledged, or found stored by a
// settle) and checks its timestamp; with ack, the handle is brought up to
// date and checked.
func (c *client) adoptAppend(o *op, sl *slot, h *handle, sent *service.Event, id string, ts int64, before time.Time, ack bool) {
	d := c.d
	k := sl.key
	s := d.m.session(k)
	msg := checkTs(s, sent, ts, before, time.Now(), sl.shared)
	if msg != "" && s.Behind && checkTs(s.as(s.View), sent, ts, before, time.Now(), sl.shared) == "" {
		msg = "" // stored after the last event of Redis's older copy
	}
	for _, lost := range s.LostUT {
		if msg != "" && checkTs(s.afterLost(lost), sent, ts, before, time.Now(), sl.shared) == "" {
			// stored after the update time a lost event left the session's
			// row (lostState), which a session read back from it takes as
			// its last (standalone single seed 218679370279, #109)
			msg = ""
		}
	}
	if msg != "" {
		c.failf(o, "event %s: %s", id, msg)
		return
	}
	if sent.ID != "" && id != sent.ID {
		c.failf(o, "stored id %q, sent %q", id, sent.ID)
		return
	}
	if id == "" {
		c.failf(o, "no id given to the event")
		return
	}
	e := storedForm(sent)
	e.ID, e.Ts, e.Client, e.Sent = id, ts, c.id, sent.Clone()
	e.Sent.ID = id
	if !sent.Timestamp.IsZero() {
		e.Req = sent.Timestamp.UnixMicro()
	}
	_, user, app, temp := split(sent.Actions.StateDelta)
	d.m.appended(k, e, temp, user, app, before)
	c.log("appended %s at %d (seq %d)", id, ts, s.rev()+1)
	if !ack {
		return
	}
	h.rev = s.rev() + 1
	wasCopy := h.ofCopy
	h.ofCopy = s.Behind
	if c.d.m.readBack(k, true) {
		h.ofCopy = false
		// Redis had lost a key of its older copy: the append put back the
		// database's session first (copyGone), and went after its events.
	} else if rev, ok := c.d.redisRev(k); s.Behind && !sl.shared && ok && rev == h.rev {
		// Redis says which numbering it stored the event at: the
		// database's (cluster single seed 234739287161, #410: a
		// ConcurrentAppends service brought a handle of the copy to the
		// database's numbering, the copy let go and read back since, the
		// event answered after the last event of either; held at the
		// copy's, the handle was taken as stale at #429).
	} else if s.Behind && !beforeCopyEnd(s.View, ts) {
		// Redis answered after its older copy's last event: the handle
		// follows the copy's numbering, and lacks the database's events the
		// copy lacks. Once the copy is let go (the database's numbering
		// back) it is stale; the model allows both (alternatives). Seed
		// 1076321771481: held at the database's numbering, the handle was
		// taken as current; so was one in cluster single seed 742397407673.
		// Answered at or before the copy's last event, the event cannot
		// have gone to the copy (Redis stores after its last event): a
		// rebasing flush had let the copy go, the session was read back
		// from the database, and the service (ConcurrentAppends) brought
		// the handle up to the database's numbering (standalone single
		// seed 1063226206056, op #316: held at the copy's numbering, the
		// handle was taken as stale at #352).
		h.rev = int64(len(s.View)) + 1
	}
	if sl.shared || h.s == nil || s.Behind || wasCopy || h.conflicted {
		return
	}
	want := d.m.session(k).state()
	got := map[string]any{}
	for kk, v := range stateOf(h.s) {
		if scopeOf(kk) == scopeSession {
			got[kk] = v
		}
	}
	if !reflect.DeepEqual(want, got) {
		c.failf(o, "session state of the handle after the append: %s, want %s", js(got), js(want))
	}
}

// beforeCopyEnd: ts is not after the last event of Redis's older copy's
// events view.
func beforeCopyEnd(view []*mEvent, ts int64) bool {
	return len(view) > 0 && ts <= view[len(view)-1].Ts
}

// checkTs checks a stored timestamp against the contract: the time asked
// for, moved to the previous event + 1 µs when not after it; the append's
// own time when none was asked for. Shared sessions: other clients' events
// come in between (the checkpoint checks the order), so only "not before
// what was asked" holds.
func checkTs(s *mSession, sent *service.Event, ts int64, before, after time.Time, shared bool) string {
	asked := sent.Timestamp.UnixMicro()
	if sent.Timestamp.IsZero() {
		asked = before.Add(-time.Second).UnixMicro()
	}
	if shared {
		if ts < asked {
			return fmt.Sprintf("stored at %d, before the time asked for (%d)", ts, asked)
		}
		return ""
	}
	last := s.lastTs()
	if len(s.Events) > 0 && ts <= last {
		return fmt.Sprintf("stored at %d, not after the previous event (%d)", ts, last)
	}
	if !sent.Timestamp.IsZero() {
		if want := s.storedTs(asked); ts != want {
			return fmt.Sprintf("stored at %d, asked %d, want %d", ts, asked, want)
		}
		return ""
	}
	if len(s.Events) > 0 && ts == last+1 {
		return ""
	}
	if ts < asked || ts > after.Add(time.Second).UnixMicro() {
		return fmt.Sprintf("stamped %v, outside the call (%v .. %v)", time.UnixMicro(ts).UTC(), before, after)
	}
	return ""
}

// settleAppend: read the session; the event is there (stored before the
// fault) or not; then deliver it again with the same id, which must settle it.
func (c *client) settleAppend(p *pending) bool {
	o := p.op
	sl := c.slotOf(p.key)
	got, ok := c.readAll(o, p.key)
	if !ok || got == nil {
		return ok
	}
	extra, ok := c.newEvents(o, p.key, got)
	if !ok {
		return true
	}
	switch {
	case len(extra) > 1:
		c.failf(o, "settle: %d events stored by one append", len(extra))
		return true
	case len(extra) == 1:
		x := extra[0]
		if !jsonEqual(x.Content, p.ev.Content) {
			c.failf(o, "settle: an unknown event was stored: %s", x.Content)
			return true
		}
		if p.want != outAppend {
			c.failf(o, "settle: stored although the model says %s", outcomeNames[p.want])
			return true
		}
		raced := c.d.m.racedSince(p.key, p.ev.Actions.StateDelta, p.writes)
		c.adoptAppend(o, sl, p.h, p.ev, x.ID, x.Timestamp.UnixMicro(), p.since, false)
		c.d.m.mayReadAs(raced)
		again := p.ev.Clone()
		again.ID = x.ID
		s := c.d.m.session(p.key)
		c.sendAppend(o, sl, p.h, again, outDup, s.Events[len(s.Events)-1])
		return true
	case p.want == outDup && p.ev.ID != "" && c.d.m.session(p.key) != nil && c.d.m.session(p.key).event(p.ev.ID) != nil:
		// The delivery again of an event a settle found stored (above)
		// failed too: its app step may not be done (the first attempt
		// stored the session's part, then failed on the app's slot), and
		// a client that gives up here leaves the app keys to the flusher.
		// The model, which took the event in with its app keys, delivers
		// it again, as a client retrying until it is answered does
		// (standalone concurrent seed 1040643014685, op #83: settled as
		// "not stored", the app key read the older value at #111).
		c.sendAppend(o, sl, p.h, p.ev.Clone(), outDup, c.d.m.session(p.key).event(p.ev.ID))
		return true
	case p.ev.ID == "" || p.want != outAppend:
		c.log("settled: not stored")
		return true
	}
	// Not stored: deliver it again (the model's answer has not changed: nothing happened to the session).
	s := c.d.m.session(p.key)
	want, had := predict(s, p.h, p.ev, c.d.e.concurrent(o.Svc))
	c.sendAppend(o, sl, p.h, p.ev.Clone(), want, had)
	return true
}

// ---------------------------------------------------------------------------
// Rewind and end of invocation.

func (c *client) rewind(o *op) {
	d := c.d
	sl := c.opSlot(c.slots[o.Slot])
	if sl == nil {
		return
	}
	k := sl.key
	s := d.m.session(k)
	if s != nil && s.Behind {
		// Not followed by the model: which copy a rewind's deltas come from.
		c.log("skipped: Redis may hold an older copy of the session")
		return
	}
	inv := "inv-unknown"
	if s != nil && o.InvMode == 0 {
		if invs := s.invocations(); len(invs) > 0 {
			inv = invs[o.Pick%len(invs)]
		}
	}
	ctx, cancel := opCtx()
	defer cancel()
	before := time.Now()
	ev, err := d.e.svcs[o.Svc].Rewind(ctx, &service.RewindRequest{AppName: k.App, UserID: k.User, SessionID: k.SID, BeforeInvocationID: inv})
	switch {
	case c.faultErr(o, err):
		c.addPending(&pending{op: o, key: k, kind: opRewind, inv: inv, since: before})
	case s == nil || inv == "inv-unknown":
		if !errors.Is(err, service.ErrNotFound) {
			c.failf(o, "rewind before %q: %v, want ErrNotFound", inv, err)
		}
		c.log("not found")
	case err != nil:
		c.failf(o, "rewind before %q: %v", inv, err)
	default:
		c.adoptRewind(o, k, inv, ev, before)
	}
}

func (c *client) adoptRewind(o *op, k sessKey, inv string, ev *service.Event, before time.Time) {
	d := c.d
	s := d.m.session(k)
	delta, files, _ := s.rewindDeltas(inv)
	var diffs []string
	if ev.Author != "user" || !strings.HasPrefix(ev.InvocationID, "e-") || ev.Actions.RewindBeforeInvocationID != inv {
		diffs = append(diffs, fmt.Sprintf("rewind event author %q invocation %q before %q", ev.Author, ev.InvocationID, ev.Actions.RewindBeforeInvocationID))
	}
	if got := jsonRound(nonNil(ev.Actions.StateDelta)); !reflect.DeepEqual(got, jsonRound(delta)) {
		diffs = append(diffs, fmt.Sprintf("rewind stateDelta %s, want %s", js(got), js(delta)))
	}
	if !reflect.DeepEqual(nonNil(ev.Actions.ArtifactDelta), nonNil(files)) {
		diffs = append(diffs, fmt.Sprintf("rewind artifactDelta %s, want %s", js(ev.Actions.ArtifactDelta), js(files)))
	}
	if msg := checkTs(s, &service.Event{}, ev.Timestamp.UnixMicro(), before, time.Now(), false); msg != "" {
		diffs = append(diffs, msg)
	}
	if len(diffs) > 0 {
		d.dump(k)
		c.failf(o, "rewind before %q: %s", inv, strings.Join(diffs, "; "))
		return
	}
	d.m.appended(k, &mEvent{ID: ev.ID, Inv: ev.InvocationID, Author: ev.Author, Ts: ev.Timestamp.UnixMicro(),
		Content: ev.Content, Delta: jsonRound(nonNil(delta)).(map[string]any), Artifacts: files, RewindBefore: inv,
		Client: c.id}, nil, nil, nil, before)
	c.log("rewound before %q: %s at %d", inv, js(delta), ev.Timestamp.UnixMicro())
}

// settleRewind: the rewind event is stored or not (a rewind is not retried:
// it is not idempotent).
func (c *client) settleRewind(p *pending) bool {
	o := p.op
	got, ok := c.readAll(o, p.key)
	if !ok || got == nil {
		return ok
	}
	extra, ok := c.newEvents(o, p.key, got)
	switch {
	case !ok:
	case len(extra) > 1:
		c.failf(o, "settle: %d events stored by one rewind", len(extra))
	case len(extra) == 1:
		c.adoptRewind(o, p.key, p.inv, extra[0], p.since)
	default:
		c.log("settled: not stored")
	}
	return true
}

func (c *client) endInvocation(o *op) {
	d := c.d
	sl := c.opSlot(c.slots[o.Slot])
	if sl == nil {
		return
	}
	k := sl.key
	s := d.m.session(k)
	inv := "inv-none"
	if s != nil {
		invs := s.invocations()
		switch {
		case o.Pick%2 == 0 && s.TInv != "":
			inv = s.TInv
		case len(invs) > 0:
			inv = invs[o.Pick%len(invs)]
		}
	}
	h := c.pickHandle(o, sl)
	if h == nil {
		return
	}
	ctx, cancel := opCtx()
	defer cancel()
	err := d.e.svcs[o.Svc].EndInvocation(ctx, h.s, inv)
	switch {
	case c.faultErr(o, err):
		c.addPending(&pending{op: o, key: k, kind: opEndInv, h: h, inv: inv})
	case err != nil:
		c.failf(o, "end invocation %q: %v", inv, err)
	default:
		c.endedInvocation(k, inv)
	}
}

func (c *client) endedInvocation(k sessKey, inv string) {
	c.d.m.endInvocation(k, inv)
	c.log("ended invocation %q", inv)
}

// ---------------------------------------------------------------------------
// Shared sessions: every client appends, with keys of its own.

func (c *client) fetchShared(o *op, sl *slot) *handle {
	k := sl.key
	ctx, cancel := opCtx()
	defer cancel()
	resp, err := c.d.e.svcs[o.Svc].Get(ctx, &service.GetRequest{AppName: k.App, UserID: k.User, SessionID: k.SID, NumRecentEvents: 2})
	switch {
	case c.faultErr(o, err):
		return nil
	case err != nil:
		c.failf(o, "get shared session: %v", err)
		return nil
	}
	s := c.d.m.session(k)
	// The read may hold events the model does not have yet (acknowledged to
	// others meanwhile): the handle's revision is at least the model's at the read.
	h := &handle{s: resp.Session, inc: s.Inc, rev: -1}
	sl.addHandle(h)
	return h
}

func (c *client) sharedAppend(o *op) {
	d := c.d
	sl := c.opSlot(c.shared[o.Slot%len(c.shared)])
	if sl == nil {
		return
	}
	k := sl.key
	h := c.pickHandle(o, sl)
	if h == nil {
		return
	}
	ev := c.buildEvent(o, d.m.session(k))
	c.sendShared(o, sl, h, ev)
}

// sendShared appends to a shared session; a stale handle (others appended)
// is read again and the same event sent again.
func (c *client) sendShared(o *op, sl *slot, h *handle, ev *service.Event) {
	d := c.d
	k := sl.key
	for attempt := 0; ; attempt++ {
		s := d.m.session(k)
		want, had := predict(s, &handle{inc: h.inc, rev: s.rev()}, ev, true)
		d.m.sent(k, ev.Actions.StateDelta)
		sent := ev.Clone()
		ctx, cancel := opCtx()
		before := time.Now()
		err := d.e.svcs[o.Svc].AppendEvent(ctx, h.s, ev)
		cancel()
		switch {
		case c.faultErr(o, err):
			c.addPending(&pending{op: o, key: k, kind: opShared, h: h, ev: sent, want: want, since: before})
		case errors.Is(err, service.ErrStaleSession) && !d.e.concurrent(o.Svc) && attempt < 50:
			if h = c.fetchShared(o, sl); h == nil {
				c.addPending(&pending{op: o, key: k, kind: opShared, ev: sent, want: want, since: before})
				return
			}
			ev = sent
			continue
		default:
			if p, ok := c.answered(o, c.alternatives(k, &handle{inc: h.inc, rev: s.rev()}, sent, want, had, true), err, sent.ID, ev); ok {
				c.record(o, sl, h, p, sent, ev, before)
			}
		}
		return
	}
}

func (c *client) settleShared(p *pending) bool {
	o := p.op
	sl := c.slotOf(p.key)
	got, ok := c.readAll(o, p.key)
	if !ok || got == nil {
		return ok
	}
	var found []*service.Event
	for _, e := range eventsOf(got) {
		if jsonEqual(e.Content, p.ev.Content) {
			found = append(found, e)
		}
	}
	h := &handle{s: got, inc: c.d.m.session(p.key).Inc}
	switch {
	case len(found) > 1:
		c.failf(o, "settle: %d events stored by one append", len(found))
	case len(found) == 1 && p.want == outAppend:
		x := found[0]
		raced := c.d.m.racedSince(p.key, p.ev.Actions.StateDelta, p.writes)
		c.adoptAppend(o, sl, h, p.ev, x.ID, x.Timestamp.UnixMicro(), p.since, false)
		c.d.m.mayReadAs(raced)
		again := p.ev.Clone()
		again.ID = x.ID
		c.sendShared(o, sl, h, again)
	case len(found) == 1 && p.want != outDup:
		c.failf(o, "settle: stored although the model says %s", outcomeNames[p.want])
	case p.ev.ID != "" && p.want == outAppend:
		c.sendShared(o, sl, h, p.ev.Clone())
	default:
		c.log("settled: %s", outcomeNames[p.want])
	}
	return true
}

// ---------------------------------------------------------------------------
// Lists and user state.

func (c *client) list(o *op) {
	d := c.d
	app, user := appName(o.App), userName(o.User)
	if o.AppWide {
		user = ""
	}
	var listed []*service.Session
	token := ""
	for {
		ctx, cancel := opCtx()
		resp, err := d.e.svcs[o.Svc].List(ctx, &service.ListRequest{AppName: app, UserID: user, PageSize: o.PageSize, PageToken: token})
		cancel()
		if c.faultErr(o, err) {
			return
		}
		if err != nil {
			c.failf(o, "list: %v", err)
			return
		}
		listed = append(listed, resp.Sessions...)
		if token = resp.NextPageToken; token == "" {
			break
		}
		if len(listed) > 10000 {
			c.failf(o, "list: more than 10000 sessions listed")
			return
		}
	}
	if diffs := c.checkList(app, user, listed); len(diffs) > 0 {
		c.failf(o, "list %q %q: %s; listed: %s", app, user, strings.Join(diffs, "; "), listedString(listed))
		return
	}
	c.log("listed %d sessions", len(listed))
}

func listedString(listed []*service.Session) string {
	var parts []string
	for _, s := range listed {
		parts = append(parts, fmt.Sprintf("%q/%q@%d", s.UserID(), s.ID(), s.LastUpdateTime().UnixMicro()))
	}
	return strings.Join(parts, " ")
}

// checkList: this client's sessions are listed exactly (present iff live,
// once, with their state and update time); others' are sessions that were
// created at some point; a user listing is newest first, an app listing in
// (user, session id) byte order.
func (c *client) checkList(app, user string, listed []*service.Session) []string {
	d := c.d
	var diffs []string
	seen := map[sessKey]int64{}
	var prev *service.Session
	for _, s := range listed {
		k := sessKey{app, s.UserID(), s.ID()}
		lu := s.LastUpdateTime().UnixMicro()
		if first, again := seen[k]; again {
			switch {
			case d.m.firstEventBeforeCreate(k):
				// Kept (docs/simulation.md): a first event stamped before
				// the session's creation moves the session down the user
				// index, behind the cursor of a walk that already listed it.
				c.log("known: %v listed twice (its first event is older than its creation)", k)
			case user != "" && c.me() >= 0 && !c.owns(k) && lu < first:
				// Another client's session that moved down the index during
				// the walk (the same rule; the model, read after the walk,
				// no longer shows that client's event that moved it, which
				// may have been rewound or deleted since).
				c.log("known: %v listed twice, moved down from %d to %d during the walk", k, first, lu)
			default:
				diffs = append(diffs, fmt.Sprintf("%v listed twice", k))
			}
		}
		seen[k] = lu
		if user != "" && s.UserID() != user {
			diffs = append(diffs, fmt.Sprintf("%v listed for user %q", k, user))
		}
		if s.Events().Len() != 0 {
			diffs = append(diffs, fmt.Sprintf("%v listed with %d events", k, s.Events().Len()))
		}
		if user == "" && prev != nil && !(prev.UserID() < s.UserID() || prev.UserID() == s.UserID() && prev.ID() < s.ID()) {
			diffs = append(diffs, fmt.Sprintf("app listing: %q/%q after %q/%q", s.UserID(), s.ID(), prev.UserID(), prev.ID()))
		}
		prev = s
		mine := c.owns(k) && !c.pendingOn(k)
		if !mine && c.me() >= 0 {
			if !d.everCreated(k) {
				diffs = append(diffs, fmt.Sprintf("%v listed, never created", k))
			}
			continue
		}
		ms := d.m.session(k)
		if ms == nil {
			diffs = append(diffs, fmt.Sprintf("%v listed, not live", k))
			continue
		}
		if !slices.ContainsFunc(ms.views(), func(evs []*mEvent) bool { return ms.as(evs).updatedAt(lu) }) {
			diffs = append(diffs, fmt.Sprintf("%v listed with update time %d, want %d", k, lu, ms.updateTime()))
		}
		for _, df := range d.m.stateDiff(k, stateOf(s), c.me(), c.owns(k), "") {
			diffs = append(diffs, fmt.Sprintf("%v listed: %s", k, df))
		}
	}
	if user != "" {
		// Newest first, among the sessions nobody changes during the walk.
		var last int64 = 1 << 62
		for _, s := range listed {
			k := sessKey{app, s.UserID(), s.ID()}
			if c.me() >= 0 && !c.owns(k) {
				continue
			}
			if d.m.indexedElsewhere(k) {
				continue
			}
			if lu := s.LastUpdateTime().UnixMicro(); lu > last {
				diffs = append(diffs, fmt.Sprintf("user listing: %v (updated %d) after a session updated %d", k, lu, last))
			} else {
				last = lu
			}
		}
	}
	for _, k := range c.expectedListed(app, user) {
		if _, ok := seen[k]; !ok {
			diffs = append(diffs, fmt.Sprintf("%v not listed", k))
		}
	}
	return diffs
}

// owns tells whether k is one of this client's sessions (in single-client
// runs, every session).
func (c *client) owns(k sessKey) bool {
	if c.d.sh.Clients == 1 || c.all {
		return true
	}
	for _, sl := range c.slots {
		if sl.key == k {
			return true
		}
	}
	return false
}

// expectedListed: the live sessions of (app, user) that must be listed.
func (c *client) expectedListed(app, user string) []sessKey {
	var out []sessKey
	for _, cl := range c.d.clients {
		if cl != c && c.me() >= 0 {
			continue
		}
		for _, sl := range cl.slots {
			k := sl.key
			if k.App == app && (user == "" || k.User == user) && !cl.pendingOn(k) && c.d.m.session(k) != nil {
				out = append(out, k)
			}
		}
	}
	if c.me() < 0 || user == "" {
		for k := range c.d.shared {
			if k.App == app && (user == "" || k.User == user) {
				out = append(out, k)
			}
		}
	}
	return out
}

func (c *client) userState(o *op) {
	d := c.d
	app, user := appName(o.App), userName(o.User)
	ctx, cancel := opCtx()
	defer cancel()
	got, err := d.e.svcs[o.Svc].GetUserState(ctx, &service.UserStateRequest{AppName: app, UserID: user})
	if c.faultErr(o, err) {
		return
	}
	if err != nil {
		c.failf(o, "user state: %v", err)
		return
	}
	if diffs := d.m.userStateDiff(userKey{app, user}, got, c.me()); len(diffs) > 0 {
		c.failf(o, "user state of %q/%q: %s", app, user, strings.Join(diffs, "; "))
		return
	}
	c.log("user state: %d keys", len(got))
}

func cloneAny(m map[string]any) map[string]any {
	if m == nil {
		return nil
	}
	out := make(map[string]any, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

func cloneInt(m map[string]int64) map[string]int64 {
	if m == nil {
		return nil
	}
	out := make(map[string]int64, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

func nonNil[V any](m map[string]V) map[string]V {
	if m == nil {
		return map[string]V{}
	}
	return m
}
