package cache

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/adksession/adksession/cache/base"
)

// DefaultShards is the number of shard hash tags a deployment spreads its
// users over when Config.Shards is zero. It must stay the same for the life of
// a deployment's data: the shard of a user is part of every key of that user.
const DefaultShards = 64

// LayoutVersion is the version of the key layout this code reads and
// writes: the keys, their fields and the change log's entries. Open records
// it in <ns>adk:meta (field layout) and refuses a Redis namespace that holds
// another version (docs/operations.md, "Upgrading"). A namespace written
// before the version was recorded holds version 1. It goes up with any
// change of the layout that code of the version before would misread.
// Version 2: the compaction index (fields x* of the undo hash, kept by
// append.lua and rewind.lua), which a process of version 1 would leave
// behind its appends. Version 3: the index marks the events that answer
// calls in buckets (xP<n>), which a view reads instead of each event's
// field, and keeps every event with a scope among the events every view
// reads (xa<n>): a view of version 3 would miss what an index kept by a
// process of version 2 lacks. Version 4: an event is kept without the maps
// of its actions that ADK writes on every event when they are empty
// (docs/redis-keys.md), which the flusher of version 3 would write to rows
// without them (every row has them: SPEC, ADK Python's form).
const LayoutVersion = 4

// Keys builds every Redis key adksession uses. Nothing else in the module
// knows a key name. layout lists them all; docs/redis-keys.md is the same
// table for operators, and a test keeps the two equal.
//
// <shard> is a number in [0, shards): a hash of (app, user). All keys of one
// user share one hash slot, so every script touches one slot; a fleet of
// users spreads over `shards` slots, and no app is a single hot slot. App
// state has a slot of its own. <app>, <user> and <sid> are escaped (see
// Escape) so ids containing ':', '{', '}', '%', spaces or control characters
// never collide.
type Keys struct {
	prefix string
	shards int
}

// keySpec describes one kind of key for operators and dashboards.
type keySpec struct {
	Pattern, Type, TTL, Writer, Reader string
}

// layout is every kind of key, as documented in docs/redis-keys.md.
var layout = []keySpec{
	{"<ns>adk:{<shard>}:s:<app>:<user>:<sid>", "hash", "none while unflushed (or while m:hold > 0); CacheTTL once flushed and idle; deleted once flushed when the flusher rebased it onto the database",
		"create.lua, append.lua, fork.lua (the new session), delete.lua (tombstone), end_invocation.lua, flusher (m:fl, m:hold, m:rb); dead_letter.lua (m:hold); prune_fence.lua (a prune's fence: a tombstone with a TTL of 2 min, m:prune, m:us), prune_unfence.lua",
		"get.lua, append.lua, List, dashboards: fields m:inc m:ct m:ut m:rev m:first m:cnt m:fl m:tinv m:del m:cid m:sz, s:<key> = session state (JSON); flusher: m:hold = dead letters whose events only Redis holds, m:rb = 1: rebased onto the database and kept (unflushed writes), rebased at every flush until it goes"},
	{"<ns>adk:{<shard>}:e:<app>:<user>:<sid>", "zset", "as the session hash",
		"append.lua, fork.lua (copies of the forked session's events); flusher trims to MaxCachedEvents", "get.lua: score = timestamp µs, member = \"<seq>:<event JSON>\": the API form, without the maps of its actions that ADK writes on every event when they are empty (`artifactDelta`, `requestedAuthConfigs`, `requestedToolConfirmations`; a read returns them empty, the flusher writes them to the row); an event put back from the database keeps them"},
	{"<ns>adk:{<shard>}:t:<app>:<user>:<sid>", "hash", "TempTTL (default 1h)",
		"append.lua (temp: keys of the running invocation); end_invocation.lua and the next invocation delete it; flushed.lua (m:tinv, when it lets go of a rebased session's keys), hydrate.lua removes m:tinv",
		"get.lua with an invocation id: field = \"temp:<key>\", value JSON; hydrate.lua, end_invocation.lua: m:tinv = the invocation that owns the hash while the session hash that names it is gone (put back into it by hydrate.lua)"},
	{"<ns>adk:{<shard>}:r:<app>:<user>:<sid>", "hash", "as the session hash",
		"create.lua (m:from, c), fork.lua (c only: a fork's rewinds replay its history), append.lua and rewind.lua (while m:from is set; x* fields, the compaction index, while it has xok); create.lua (xok), index_build.lua (the compaction index of a session read back from the database or forked, at its first compacted read); delete.lua; flusher trims <seq> fields below the cached tail (setting the i:<inv> they name to 0) and raises m:from",
		"rewind.lua: m:from = oldest seq undo records cover, c = create-time session state (JSON object), a:<file> = current artifact version, i:<inv> = seq of the invocation's first event (0: older than the records), <seq> = JSON {i: invocation when first, s: [key, previous JSON value or false], a: [file, previous version or false]}; get.lua and compacted_calls.lua (a compacted view, while xok is set): the compaction index (index.lua), where a ref is \"<seq>/<ts µs>\": xok = 1: the index covers every event, xb and xv = while index_build.lua builds it, the next seq and the invocation before it, xH = ref of the frontier list's head, xc<seq> = \"<start µs> <end µs> <next ref or 0>\" (a plain compaction in the list), xA = number of events every view reads and xa<n> = the nth (rewinds, the first events they rewind to, compactions that cover nothing, scoped events), xi<inv> = \"<ref of its first event> <frontier head before it or 0>\", xo<id> = ref of the first call of id with arguments, xC<id> / xR<id> = refs of the events calling / answering id, xq<seq> / xp<seq> = an event's call ids / the response ids it answers, xP<n> = the events of seqs 32n to 32n + 31 that answer calls (have xp), as the bits of an integer, xS<scope> = ref of the scope's first event and xs<seq> = that event's scope, xh = ref of the first event with actions.compaction, xj = \"<ref> <endTime µs>\" of ADK JS's last compacted event, xt = the timestamp µs of the first event (a view reads nothing from before it)"},
	{"<ns>adk:{<shard>}:i:<app>:<user>:<sid>", "zset", "as the session hash",
		"create.lua and delete.lua (remove it), append.lua, fork.lua, hydrate.lua; flusher trims it with the events; prune_fence.lua deletes it",
		"append.lua: member = event id, score = its seq; holds exactly the ids of the cached events (a retried event id is answered with the stored event)"},
	{"<ns>adk:{<shard>}:he:<app>:<user>:<sid>", "zset", "none: it exists only within one MULTI",
		"a cold read (cache.Store.Hydrate: the events read from the database, staged)", "hydrate.lua: checks it and renames it to the session's events zset, or deletes it; the MULTI deletes it after the script whatever it answered"},
	{"<ns>adk:{<shard>}:hi:<app>:<user>:<sid>", "zset", "none: it exists only within one MULTI",
		"a cold read (cache.Store.Hydrate: the events' ids, staged)", "hydrate.lua: checks it and renames it to the session's event ids zset, or deletes it, as the staged events"},
	{"<ns>adk:{<shard>}:u:<app>:<user>", "hash", "none while unflushed (or while its revision is dead-lettered); CacheTTL once flushed and idle; deleted once flushed when the flusher rebased it onto the database",
		"create.lua, append.lua (user: keys), fork.lua (m:rev when missing); hydrate_state.lua (m:fc, m:fr from the database's count); flusher (m:fl, m:dl, m:rb, m:fr; state_read.lua: m:fc); prune_user.lua deletes it", "get.lua, GetUserState: m:rev, s:<key> without \"user:\"; create.lua, append.lua: m:sz = the state's total; flusher: m:fl = revision in the database, m:dl = revision dead-lettered, m:rb = 1: out of step with the database, rebased at every flush until it goes, m:fc = the flusher's reads of the hash (at or below the database's count: an older copy), m:fr = one above the greatest of those counts the hash knows the database records (at or below the database's count: an older copy, whatever reads of batches that never committed counted since)"},
	{"<ns>adk:{<shard>}:us:<app>:<user>", "zset", "as the user hash (flushed.lua gives both CacheTTL together)",
		"create.lua, append.lua, fork.lua, delete.lua, rewind.lua; hydrate_index.lua rebuilds it from the database and the app index; hydrate.lua, flushed.lua and a user listing (WATCH/MULTI) set a session's score to the update time a listing shows when Redis holds nothing newer; prune_fence.lua, prune_unfence.lua, prune_user.lua",
		"List of a user, create.lua (with a database, a complete index that lists the id refuses a create of it): member = session id, score = last update µs; member \"\" (score 0) = the index lists every session of the user (without it, with a database, it is rebuilt)"},
	{"<ns>adk:{<shard>}:as:<app>", "zset", "none; with a database it holds only sessions whose create is not flushed yet (flushed.lua removes the others), without one every session",
		"create.lua, fork.lua, delete.lua, flushed.lua", "List of a whole app (merged with the database's sessions), user index rebuilds: member = \"<user> NUL <sid>\" (raw ids), score 0, so lexicographic order is (user, sid) byte order"},
	{"<ns>adk:{<shard>}:log", "stream", "none; entries deleted once flushed",
		"create.lua, append.lua, fork.lua (a create, then an append per event copied), delete.lua, rewind.lua (only with a database)", "flusher: fields k (c|a|d), a, u, i, n (incarnation µs), q (seq), t (ts µs), p (app delta JSON), o (its order number, app_order.lua), e (event id), w (user delta JSON: a create's initial user: keys, an event's), x (fork.lua: 1 on a copied event's entry, the number of copies on the new session's create)"},
	{"<ns>adk:{<shard>}:lease", "string", "lease time (renewed while held)",
		"flusher (lease_acquire.lua, lease_release.lua)", "flusher: id of the flusher draining this shard"},
	{"<ns>adk:{<shard>}:g", "hash", "none (127 counters, fields \"0\" to \"126\", and epoch: a random token, set by the first cold read after the hash was made)",
		"flusher (flushed.lua: a session's field when its keys get a TTL or its flushed tombstone goes, the user's when the user hash gets a TTL or one of its tombstones goes); a prune (the fields of the sessions it deleted and of their users)",
		"hydrate.lua, hydrate_state.lua (user state), hydrate_index.lua: read guards; a cold read reads its field and the epoch before the database and puts back what it read only while both are unchanged (docs/design.md, \"Cold reads\")"},
	{"<ns>adk:{<shard>}:dead", "list", "none; operators inspect and remove entries",
		"flusher (ack.lua)", "operators, dashboards: what the flusher gave up on, as JSON {id, fields (of the change-log entry), unit, reason, time}; unit is entry, event (+ seq, event or member), session (+ events_written), user state or app state (+ rev, state)"},
	{"<ns>adk:{a:<app>}:a", "hash", "none",
		"app_apply.lua; hydrate_state.lua; flusher (m:dl); prune_app.lua deletes it", "Get, List: m:rev, s:<key> without \"app:\"; app_order.lua: m:sz = the state's total; flusher: m:dl = revision dead-lettered"},
	{"<ns>adk:{a:<app>}:ap", "zset", "none; members older than 7 days trimmed",
		"app_apply.lua", "app_apply.lua: ids of app deltas already applied, and skip/<id> for a change the flusher's repair skipped (its order number lost), score = ms"},
	{"<ns>adk:{a:<app>}:ao", "hash", "none",
		"app_order.lua (m:n, m:floor), app_apply.lua (k:<key>); prune_app.lua deletes it",
		"app_apply.lua: m:n = last order number taken (Redis's clock in µs, or the number before + 1), m:floor = where the numbers of this hash start (a number at or below it was taken from a hash Redis lost), k:<key> = number of the change that last wrote the key (without \"app:\")"},
	{"<ns>adk:meta", "hash", "none", "Open", "Open: shards = shard count of the deployment, layout = version of the key layout (cache.LayoutVersion; a process refuses another)"},
	{"<ns>adk:wake", "pub/sub channel (not a key)", "",
		"create.lua, append.lua, fork.lua, delete.lua, rewind.lua (only with a database): PUBLISH when a shard's change log gets its first entry",
		"flushers: SUBSCRIBE while idle, then a pass over the shards"},
	{"<ns>adk:stats", "hash", "none", "flusher", "dashboards: flush lag, backlog, batches, retries, dead letters"},
	{"<ns>adk:prune:lease", "string", "Config.Retention.Interval (renewed while a prune runs)",
		"background retention (lease_acquire.lua, lease_release.lua)", "background retention: id of the process that pruned last; the fleet prunes when it is free"},
}

// NewKeys returns the key builder of a namespace. namespace may be empty; it
// must not contain '{' or '}' (they would change the hash slot of every key).
func NewKeys(namespace string, shards int) (Keys, error) {
	if strings.ContainsAny(namespace, "{}") {
		return Keys{}, fmt.Errorf("namespace %q: must not contain '{' or '}'", namespace)
	}
	if shards <= 0 {
		shards = DefaultShards
	}
	return Keys{prefix: namespace + "adk:", shards: shards}, nil
}

// Shards is the number of shards of the layout.
func (k Keys) Shards() int { return k.shards }

// Shard is the shard of a user: FNV-1a of app, NUL, user, modulo the shard count.
func (k Keys) Shard(app, user string) int {
	h := fnv1a(fnvOffset, app) * fnvPrime // the NUL: h ^ 0 == h
	return int(fnv1a(h, user) % uint32(k.shards))
}

// FNV-1a, 32 bits (hash/fnv's New32a, without its allocations).
const fnvOffset, fnvPrime = 2166136261, 16777619

// fnv1a goes on from the FNV-1a hash h with the bytes of s.
func fnv1a(h uint32, s string) uint32 {
	for i := 0; i < len(s); i++ {
		h = (h ^ uint32(s[i])) * fnvPrime
	}
	return h
}

func (k Keys) tag(shard int) string {
	return k.prefix + "{" + strconv.Itoa(shard) + "}:"
}

// SessionKeys are the keys one session script may touch; all share a slot.
type SessionKeys struct {
	Shard     int
	Session   string // hash: meta + session state
	Events    string // zset: event log
	Temp      string // hash: temp: state of the current invocation
	User      string // hash: user state
	UserIndex string // zset: the user's sessions
	AppIndex  string // zset: the app's sessions in this shard
	Log       string // stream: the shard's change log
	Undo      string // hash: what undoes each event, first seq of each invocation (rewind.lua)
	EventIDs  string // zset: ids of the cached events, score = seq
}

// Session returns the keys of session (app, user, sid).
// Every append builds them: they are cut from one string, one allocation.
func (k Keys) Session(app, user, sid string) SessionKeys {
	shard := k.Shard(app, user)
	var num [20]byte
	tag := strconv.AppendInt(num[:0], int64(shard), 10)
	app, user, sid = Escape(app), Escape(user), Escape(sid)
	var b strings.Builder
	// Exactly the bytes below, so that the keys take one allocation: nine
	// times "<prefix>{<tag>}:" and a kind (21 bytes in all); app in eight
	// keys, user in seven, sid in five, with 12 ':' between them.
	b.Grow(9*(len(k.prefix)+len(tag)+3) + 21 + 8*len(app) + 7*len(user) + 5*len(sid) + 12)
	var at [9][2]int
	for i, kind := range [9]string{"s:", "e:", "t:", "u:", "us:", "as:", "log", "r:", "i:"} {
		at[i][0] = b.Len()
		b.WriteString(k.prefix)
		b.WriteByte('{')
		b.Write(tag)
		b.WriteString("}:")
		b.WriteString(kind)
		switch i {
		case 5: // the app's index
			b.WriteString(app)
		case 0, 1, 2, 7, 8: // the session's own keys
			b.WriteString(app)
			b.WriteByte(':')
			b.WriteString(user)
			b.WriteByte(':')
			b.WriteString(sid)
		case 3, 4: // the user's
			b.WriteString(app)
			b.WriteByte(':')
			b.WriteString(user)
		}
		at[i][1] = b.Len()
	}
	all := b.String()
	key := func(i int) string { return all[at[i][0]:at[i][1]] }
	return SessionKeys{Shard: shard, Session: key(0), Events: key(1), Temp: key(2), User: key(3), UserIndex: key(4),
		AppIndex: key(5), Log: key(6), Undo: key(7), EventIDs: key(8)}
}

// StageKeys are where a cold read stages a session's events and their ids,
// for hydrate.lua to rename into place, in one MULTI: they exist only
// within it.
type StageKeys struct {
	Events   string // zset: as SessionKeys.Events
	EventIDs string // zset: as SessionKeys.EventIDs
}

// Stage returns the staging keys of session (app, user, sid), in its slot.
func (k Keys) Stage(app, user, sid string) StageKeys {
	t := k.tag(k.Shard(app, user))
	rest := Escape(app) + ":" + Escape(user) + ":" + Escape(sid)
	return StageKeys{Events: t + "he:" + rest, EventIDs: t + "hi:" + rest}
}

// Owned are the keys of the session besides its hash: what goes with it
// when it is pruned. A new key of one session belongs here.
func (k SessionKeys) Owned() []string { return []string{k.Events, k.Temp, k.Undo, k.EventIDs} }

// AppKeys are the keys of an app's shared state; they live in their own slot.
type AppKeys struct {
	State   string // hash: app state
	Applied string // zset: app-delta event ids already applied
	Order   string // hash: order numbers of app changes, per key
}

// App returns the keys of app's state.
func (k Keys) App(app string) AppKeys {
	t := k.prefix + "{a:" + Escape(app) + "}:"
	return AppKeys{State: t + "a", Applied: t + "ap", Order: t + "ao"}
}

// ShardKeys are the per-shard keys the flusher works on.
type ShardKeys struct {
	Log    string // stream: change log
	Lease  string // string: flusher lease
	Dead   string // list: dead letters
	Guards string // hash: read guards of cold reads (see ReadGuard)
}

// ShardKeys returns the flusher keys of shard.
func (k Keys) ShardKeys(shard int) ShardKeys {
	t := k.tag(shard)
	return ShardKeys{Log: t + "log", Lease: t + "lease", Dead: t + "dead", Guards: t + "g"}
}

// guardFields is the number of counters of a shard's read guards hash: with
// its epoch (ReadGuard), few enough for Redis's compact hash encoding (128
// entries), many enough that a cold read rarely waits on another user's
// flush.
const guardFields = 127

// GuardField is the field of a session's read guard (ref.ID "" for the
// user's own: its state and session index) in its shard's read guards hash.
// Sessions and users share the fields: two that share one only read again
// more often.
func GuardField(ref base.SessionRef) string {
	const offset, prime = 2166136261, 16777619 // FNV-1a, 32 bits
	h := uint32(offset)
	for _, s := range [3]string{ref.App, ref.User, ref.ID} {
		for i := 0; i < len(s); i++ {
			h = (h ^ uint32(s[i])) * prime
		}
		h *= prime // a NUL between the parts
	}
	return strconv.Itoa(int(h % guardFields))
}

// Meta is the hash of deployment facts (shard count).
func (k Keys) Meta() string { return k.prefix + "meta" }

// Stats is the flusher summary hash dashboards read.
func (k Keys) Stats() string { return k.prefix + "stats" }

// Wake is the pub/sub channel the scripts publish on when a shard's change
// log gets its first entry, so that idle flushers wait for it instead of
// polling every shard.
func (k Keys) Wake() string { return k.prefix + "wake" }

// PruneLease is the lease of the fleet's background prune.
func (k Keys) PruneLease() string { return k.prefix + "prune:lease" }

// AppIndexMember is the member of a session in an app index zset: the raw
// ids joined by NUL, which no id contains, so that the members' byte order
// is the (user, sid) order the database lists sessions in.
func AppIndexMember(user, sid string) string { return user + "\x00" + sid }

// appIndexUserRange is the ZRANGE BYLEX range ("[<user> NUL" to
// "(<user> \x01") of every member of user in an app index.
func appIndexUserRange(user string) (min, max string) {
	return "[" + AppIndexMember(user, ""), "(" + user + "\x01"
}

// appIndexAfter is the exclusive ZRANGE BYLEX bound of the members after
// session (user, sid) in an app index.
func appIndexAfter(user, sid string) string { return "(" + AppIndexMember(user, sid) }

// ParseAppIndexMember reverses AppIndexMember.
func ParseAppIndexMember(m string) (user, sid string, err error) {
	user, sid, ok := strings.Cut(m, "\x00")
	if !ok {
		return "", "", fmt.Errorf("app index member %q: no NUL between user and session id", m)
	}
	return user, sid, nil
}

// IndexComplete is the member of a user index that says the index lists
// every session of the user (no session id is empty).
const IndexComplete = ""

// AppIndex returns the key of app's index in shard.
func (k Keys) AppIndex(shard int, app string) string { return k.tag(shard) + "as:" + Escape(app) }

// Escape percent-encodes the bytes of an id that would make keys ambiguous or
// hard to read: '%', ':', '{', '}', space, and control characters. It is
// injective, and undone by Unescape (and by any URL percent-decoder).
func Escape(s string) string {
	n := 0
	for i := 0; i < len(s); i++ {
		if needsEscape(s[i]) {
			n++
		}
	}
	if n == 0 {
		return s
	}
	var b strings.Builder
	b.Grow(len(s) + 2*n)
	const hexDigits = "0123456789ABCDEF"
	for i := 0; i < len(s); i++ {
		c := s[i]
		if needsEscape(c) {
			b.WriteByte('%')
			b.WriteByte(hexDigits[c>>4])
			b.WriteByte(hexDigits[c&15])
			continue
		}
		b.WriteByte(c)
	}
	return b.String()
}

func needsEscape(c byte) bool {
	return c <= ' ' || c == 0x7f || c == '%' || c == ':' || c == '{' || c == '}'
}

// Unescape reverses Escape.
func Unescape(s string) (string, error) {
	if !strings.Contains(s, "%") {
		return s, nil
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] != '%' {
			b.WriteByte(s[i])
			continue
		}
		if i+2 >= len(s) {
			return "", fmt.Errorf("unescape %q: truncated escape", s)
		}
		v, err := strconv.ParseUint(s[i+1:i+3], 16, 8)
		if err != nil {
			return "", fmt.Errorf("unescape %q: %w", s, err)
		}
		b.WriteByte(byte(v))
		i += 2
	}
	return b.String(), nil
}
