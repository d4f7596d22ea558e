package sim

// Operations, generated as a pure function of (seed, client): what to do,
// never what the answer will be. Operations name sessions by slot and events
// by position; the driver resolves them against the model when it runs them,
// so a replay of a seed runs the same operations whatever the answers were.

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strings"
	"time"
)

type opKind int

const (
	opCreate opKind = iota
	opAppend
	opGet
	opList
	opUserState
	opDelete
	opRewind
	opEndInv
	opShared // append to a session every client appends to
	opFlush
	opCheck
	opADK // ADK Python appends to one of the client's sessions in the database
	// Faults (client 0 only).
	opEvict
	opFlushAll
	opFlusherKill
	opPgStop
	opPgStart
	opRedisRestart
	opFailover
	opSnapshot // Redis's state taken: an RDB snapshot (SAVE), one session's keys (DUMP), or a replica held (hold)
	opRegress  // Redis put back to the snapshot: restarted from the RDB, the keys restored, or a failover to the held replica
	opInFlight // FLUSHALL, or a session's keys evicted, while a flusher's batch waits on a Postgres lock
)

var opNames = [...]string{"create", "append", "get", "list", "user-state", "delete", "rewind", "end-invocation",
	"shared-append", "flush", "check", "adk-append", "evict", "flushall", "flusher-kill", "pg-stop", "pg-start", "redis-restart",
	"failover", "snapshot", "regress", "in-flight"}

func (k opKind) String() string { return opNames[k] }

func (k opKind) fault() bool { return k >= opEvict }

// idMode says which id an appended event carries.
type idMode int

const (
	idGenerated idMode = iota // none: the service draws one
	idFresh                   // a new one the client chose
	idRetry                   // the id and content of an event the session holds: a duplicate delivery
	idReuse                   // the id of an event the session holds, with other content: ErrAlreadyExists
	idForeign                 // the id of an event of another session or incarnation: a new event here
)

var idModeNames = [...]string{"generated", "fresh", "retry", "reuse", "foreign"}

// Timestamp modes of an appended event.
const (
	tsNow     = iota // zero: the service stamps it
	tsVirtual        // a virtual clock in 2024, moving forward with the steps
	tsPast           // a jump back to 1970-2000 (stored after the previous event)
	tsFuture         // a jump forward to 2100-2199 (later events follow it)
)

var tsModeNames = [...]string{"now", "virtual", "past", "future"}

type op struct {
	Step, Client int
	Kind         opKind
	Slot         int // session slot of the client (opShared: shared session index)
	Svc          int // which Service instance (process) runs it
	Handle       int // which handle of the slot; -1: Get a fresh one first
	Pick         int // resolves "which event / invocation / key" against the model
	// Create
	State map[string]any
	// Append, shared append
	IDMode    idMode
	InvMode   int // 0: the current invocation, 1: a new one (NewInv), 2: an older one of the session
	NewInv    string
	TsMode    int
	Ts        int64 // µs, for tsVirtual / tsPast / tsFuture
	Author    string
	Content   json.RawMessage
	Delta     map[string]any
	Artifacts map[string]int64
	// Extra: top-level keys of the event a case away from "id" and
	// "invocationId" (the service keeps them as the event's own keys; the
	// flusher once read the row's id from such a key, or failed the row)
	Extra map[string]json.RawMessage
	// Get
	NumRecent int
	AfterMode int // 0: none, 1: at event Pick, 2: 1µs after event Pick, 3: before every event, 4: after every event
	TempMode  int // 0: no invocation, 1: the current one, 2: another
	// List
	PageSize int
	AppWide  bool
	User     int // user index (opList, opUserState)
	App      int
	// Faults
	Count int           // evict: keys (0: every key with a TTL)
	Delay time.Duration // redis-restart, failover: how far into the next operation; flusher-kill: how long it runs
	Mode  string        // pg-stop: fast / immediate
}

func (o *op) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "#%d c%d %s", o.Step, o.Client, o.Kind)
	switch o.Kind {
	case opCreate:
		fmt.Fprintf(&b, " slot=%d svc=%d state=%s", o.Slot, o.Svc, js(o.State))
	case opAppend, opShared:
		fmt.Fprintf(&b, " slot=%d svc=%d handle=%d id=%s pick=%d inv=%d/%s ts=%s/%d author=%s delta=%s artifacts=%s content=%s",
			o.Slot, o.Svc, o.Handle, idModeNames[o.IDMode], o.Pick, o.InvMode, o.NewInv, tsModeNames[o.TsMode], o.Ts,
			o.Author, js(o.Delta), js(o.Artifacts), o.Content)
		if o.Extra != nil {
			fmt.Fprintf(&b, " extra=%s", js(o.Extra))
		}
	case opGet:
		fmt.Fprintf(&b, " slot=%d svc=%d n=%d after=%d pick=%d temp=%d", o.Slot, o.Svc, o.NumRecent, o.AfterMode, o.Pick, o.TempMode)
	case opList:
		fmt.Fprintf(&b, " svc=%d app=%d user=%d appwide=%v page=%d", o.Svc, o.App, o.User, o.AppWide, o.PageSize)
	case opUserState:
		fmt.Fprintf(&b, " svc=%d app=%d user=%d", o.Svc, o.App, o.User)
	case opDelete, opEndInv:
		fmt.Fprintf(&b, " slot=%d svc=%d pick=%d", o.Slot, o.Svc, o.Pick)
	case opRewind:
		fmt.Fprintf(&b, " slot=%d svc=%d pick=%d unknown=%v", o.Slot, o.Svc, o.Pick, o.InvMode == 1)
	case opEvict:
		fmt.Fprintf(&b, " count=%d pick=%d", o.Count, o.Pick)
	case opFlusherKill, opRedisRestart, opFailover:
		fmt.Fprintf(&b, " delay=%v pick=%d", o.Delay, o.Pick)
	case opPgStop, opSnapshot:
		fmt.Fprintf(&b, " mode=%s", o.Mode)
	case opInFlight:
		fmt.Fprintf(&b, " mode=%s cold-get=%v slot=%d svc=%d id=%s pick=%d inv=%d/%s ts=%s/%d author=%s delta=%s artifacts=%s content=%s",
			o.Mode, o.coldGet(), o.Slot, o.Svc, idModeNames[o.IDMode], o.Pick, o.InvMode, o.NewInv, tsModeNames[o.TsMode], o.Ts,
			o.Author, js(o.Delta), js(o.Artifacts), o.Content)
	case opADK:
		fmt.Fprintf(&b, " slot=%d pick=%d", o.Slot, o.Pick)
	}
	return b.String()
}

// coldGet tells whether an in-flight fault reads its session while the
// batch waits (a bit of Pick that appendOp does not use).
func (o *op) coldGet() bool { return (o.Pick>>1)%2 == 0 }

// shape is what a run looks like: how many clients, slots, users, apps,
// services, shared sessions, which faults.
type shape struct {
	Clients, Slots, Users, Apps, Services, Shared int
	Cluster                                       bool
	Faults                                        bool
	Behind                                        bool // Redis behind the database: snapshot/regress faults, the ADK writer
}

// Identities: odd characters in every kind of id (the contract: ids never collide, whatever their characters).
func appName(i int) string {
	if i%2 == 1 {
		return fmt.Sprintf("app:%d{x}", i)
	}
	return fmt.Sprintf("app-%d", i)
}

func userName(i int) string {
	if i%3 == 1 {
		return fmt.Sprintf("u %d/{y}", i)
	}
	return fmt.Sprintf("u%d", i)
}

func (sh shape) slotKey(client, slot int) sessKey {
	sid := fmt.Sprintf("c%d-s%d", client, slot)
	if slot%3 == 2 {
		sid = fmt.Sprintf("c%d s%d:{z}\n", client, slot)
	}
	return sessKey{appName(slot % sh.Apps), userName((client + slot) % sh.Users), sid}
}

func (sh shape) sharedKey(i int) sessKey {
	return sessKey{appName(i % sh.Apps), "shared", fmt.Sprintf("shared-%d", i)}
}

// gen produces the operations of one client.
type gen struct {
	sh     shape
	client int
	rng    *rand.Rand
	step   int
	clock  int64 // virtual clock, µs
	pgDown int   // steps left until pg-start (client 0), 0: up
	snap   bool  // a snapshot was taken and not put back yet (client 0)
}

func newGen(seed int64, client int, sh shape) *gen {
	return &gen{sh: sh, client: client, rng: rand.New(rand.NewPCG(uint64(seed), uint64(client)+1)),
		clock: time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC).UnixMicro() + int64(client)*1000}
}

type weighted struct {
	kind opKind
	w    int
}

func (g *gen) weights() []weighted {
	ws := []weighted{{opCreate, 6}, {opAppend, 40}, {opGet, 14}, {opList, 4}, {opUserState, 2}, {opDelete, 3},
		{opRewind, 5}, {opEndInv, 3}}
	if g.sh.Shared > 0 {
		ws = append(ws, weighted{opShared, 8})
	}
	if g.pgDown == 0 {
		ws = append(ws, weighted{opFlush, 2})
	}
	if g.sh.Faults && g.sh.Behind {
		ws = append(ws, weighted{opADK, 1})
	}
	if g.client == 0 && g.sh.Faults && g.snap {
		// Between a snapshot and its regress: no fault that would take
		// Redis's state elsewhere (the regress tells the model what it loses).
		return append(ws, weighted{opEvict, 3}, weighted{opFlusherKill, 1}, weighted{opRegress, 3})
	}
	if g.client == 0 && g.sh.Faults {
		ws = append(ws, weighted{opEvict, 3}, weighted{opFlusherKill, 1}, weighted{opRedisRestart, 1})
		if g.sh.Behind {
			ws = append(ws, weighted{opSnapshot, 1})
		}
		if g.pgDown == 0 {
			ws = append(ws, weighted{opPgStop, 1})
		}
		if g.sh.Clients == 1 && g.pgDown == 0 {
			// In-flight: only where the one batch holds every unflushed
			// write (other clients' writes would be lost with a FLUSHALL).
			ws = append(ws, weighted{opFlushAll, 1}, weighted{opInFlight, 1})
		}
		if g.sh.Cluster {
			ws = append(ws, weighted{opFailover, 1})
		}
	}
	return ws
}

func (g *gen) next() *op {
	g.step++
	g.clock += 1000 + g.rng.Int64N(50_000)
	o := &op{Step: g.step, Client: g.client, Slot: g.rng.IntN(g.sh.Slots), Svc: g.rng.IntN(g.sh.Services),
		Handle: g.rng.IntN(4) - 1, Pick: g.rng.IntN(1 << 20)}
	if g.pgDown > 0 {
		g.pgDown--
		if g.pgDown == 0 {
			o.Kind = opPgStart
			return o
		}
	}
	ws := g.weights()
	total := 0
	for _, w := range ws {
		total += w.w
	}
	r := g.rng.IntN(total)
	for _, w := range ws {
		if r < w.w {
			o.Kind = w.kind
			break
		}
		r -= w.w
	}
	switch o.Kind {
	case opCreate:
		o.State = g.delta(false, true)
	case opAppend, opShared:
		g.event(o)
	case opGet:
		o.NumRecent = []int{0, 0, 1, 2, 5, 9}[g.rng.IntN(6)]
		o.AfterMode = []int{0, 0, 1, 2, 3, 4}[g.rng.IntN(6)]
		o.TempMode = g.rng.IntN(3)
	case opList:
		o.AppWide = g.rng.IntN(3) == 0
		o.User = g.rng.IntN(g.sh.Users)
		o.App = g.rng.IntN(g.sh.Apps)
		o.PageSize = []int{1, 2, 3, 100}[g.rng.IntN(4)]
	case opUserState:
		o.User = g.rng.IntN(g.sh.Users)
		o.App = g.rng.IntN(g.sh.Apps)
	case opRewind:
		if g.rng.IntN(8) == 0 {
			o.InvMode = 1 // an invocation the session does not have
		}
	case opEvict:
		o.Count = []int{0, 1, 2, 5, 20}[g.rng.IntN(5)]
	case opFlusherKill:
		o.Delay = time.Duration(g.rng.IntN(40)) * time.Millisecond
	case opRedisRestart, opFailover:
		o.Delay = time.Duration(g.rng.IntN(30)) * time.Millisecond
	case opPgStop:
		o.Mode = []string{"fast", "immediate"}[g.rng.IntN(2)]
		g.pgDown = 3 + g.rng.IntN(12)
	case opSnapshot:
		g.snap = true
		// In the single mode an RDB snapshot of the standalone Redis, or a
		// cluster replica held behind (in the concurrent mode the checkpoints
		// take and put back both); one session's keys otherwise.
		o.Mode = "dump"
		if g.sh.Clients == 1 && g.rng.IntN(2) == 0 {
			o.Mode = "rdb"
			if g.sh.Cluster {
				o.Mode = "hold"
			}
		}
	case opRegress:
		g.snap = false
	case opInFlight:
		// The batch in flight holds one new event of the slot's session,
		// appended after a complete flush (a fresh handle: not stale).
		g.event(o)
		o.IDMode, o.Handle = []idMode{idGenerated, idFresh}[g.rng.IntN(2)], -1
		o.Mode = []string{"flushall", "evict", "evict-user"}[g.rng.IntN(3)]
	}
	return o
}

// event fills an append's event.
func (g *gen) event(o *op) {
	o.IDMode = idMode([]int{0, 0, 1, 1, 1, 2, 3, 4}[g.rng.IntN(8)])
	o.InvMode = []int{0, 0, 0, 1, 1, 2}[g.rng.IntN(6)]
	o.NewInv = fmt.Sprintf("inv-c%d-%d", g.client, g.step)
	switch r := g.rng.IntN(20); {
	case r < 8:
		o.TsMode = tsNow
	case r < 17:
		o.TsMode, o.Ts = tsVirtual, g.clock
	case r < 19:
		o.TsMode = tsPast
		o.Ts = time.Date(1970, 1, 2, 0, 0, 0, 0, time.UTC).UnixMicro() + g.rng.Int64N(30*365*24*3600*1_000_000)
	default:
		o.TsMode = tsFuture
		o.Ts = time.Date(2100, 1, 1, 0, 0, 0, 0, time.UTC).UnixMicro() + g.rng.Int64N(99*365*24*3600*1_000_000)
	}
	o.Author = []string{"user", "model", "agent_b"}[g.rng.IntN(3)]
	o.Content = g.content(fmt.Sprintf("op c%d-%d", g.client, g.step))
	if g.step%8 == 5 { // by the step, not the generator: the seeds' other draws stay as they were
		o.Extra = map[string]json.RawMessage{
			"ID":           json.RawMessage(fmt.Sprintf(`"not-the-id-c%d-%d"`, g.client, g.step)),
			"InvocationID": json.RawMessage(`{"not":"the invocation"}`),
		}
	}
	o.Delta = g.delta(o.Kind == opShared, false)
	if g.rng.IntN(4) == 0 {
		o.Artifacts = map[string]int64{}
		for range 1 + g.rng.IntN(2) {
			f := []string{"f0.txt", "f1.png", "user:f2"}[g.rng.IntN(3)]
			o.Artifacts[f] = g.rng.Int64N(5)
		}
	}
}

func (g *gen) content(marker string) json.RawMessage {
	parts := []string{fmt.Sprintf(`{"text":%q}`, marker+" "+[]string{"hello", "héllo ☃ \"quoted\"", "line\nbreak", "{x}:y"}[g.rng.IntN(4)])}
	switch g.rng.IntN(4) {
	case 1:
		parts = append(parts, `{"functionCall":{"id":"call-1","name":"get_weather","args":{"city":"Paris","camelKey":1}}}`)
	case 2:
		parts = append(parts, `{"functionResponse":{"id":"call-1","name":"get_weather","response":{"temp_c":21.5,"someKey":[1,2]}}}`)
	case 3:
		data := base64.StdEncoding.EncodeToString([]byte(fmt.Sprintf("bytes %d \x00\xff", g.rng.IntN(1000))))
		parts = append(parts, fmt.Sprintf(`{"inlineData":{"mimeType":"application/octet-stream","data":%q}}`, data))
	}
	role := []string{"user", "model"}[g.rng.IntN(2)]
	return json.RawMessage(fmt.Sprintf(`{"role":%q,"parts":[%s]}`, role, strings.Join(parts, ",")))
}

// delta draws a few keys of the four scopes. Keys carry the client's name
// ("c<n>.") where another client could write the same key: user and app keys
// always, session keys of shared sessions.
func (g *gen) delta(shared, create bool) map[string]any {
	d := map[string]any{}
	n := g.rng.IntN(5)
	if create {
		n = g.rng.IntN(4)
	}
	c := g.client
	for range n {
		var k string
		switch r := g.rng.IntN(12); {
		case r < 5:
			k = []string{"k0", "k1", "k2", "k:colon", "k{brace} space"}[g.rng.IntN(5)]
			if shared {
				k = fmt.Sprintf("c%d.%s", c, k)
			}
		case r < 7:
			k = fmt.Sprintf("user:c%d.u%d", c, g.rng.IntN(3))
		case r < 9:
			k = fmt.Sprintf("app:c%d.a%d", c, g.rng.IntN(3))
		case r < 10:
			k = fmt.Sprintf("app:user:c%d.z", c) // the app key "user:c<n>.z"
		default:
			if shared {
				continue // temp state of shared sessions changes hands with every invocation
			}
			k = fmt.Sprintf("temp:t%d", g.rng.IntN(3))
		}
		d[k] = g.value()
	}
	return d
}

func (g *gen) value() any {
	switch g.rng.IntN(10) {
	case 0:
		return nil
	case 1:
		return g.rng.IntN(1000)
	case 2:
		return 0.25 + float64(g.rng.IntN(100))
	case 3:
		return []string{"", "x", "héllo ☃", "tab\tquote\"", "{x}:y"}[g.rng.IntN(5)]
	case 4:
		return g.rng.IntN(2) == 0
	case 5:
		return map[string]any{"a": []any{1, "two", nil}, "nested": map[string]any{"k": g.rng.IntN(9)}}
	case 6:
		return []any{}
	case 7:
		return map[string]any{}
	default:
		return fmt.Sprintf("v%d", g.rng.IntN(1<<16))
	}
}
