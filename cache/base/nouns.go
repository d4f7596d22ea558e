package base

// ChangeKind is what a change-log entry records, as its field k holds it.
type ChangeKind byte

const (
	ChangeCreate ChangeKind = 'c' // create.lua, fork.lua
	ChangeAppend ChangeKind = 'a' // append.lua, rewind.lua (an event appended)
	ChangeDelete ChangeKind = 'd' // delete.lua
)

// String names the kind as operators read it ("create", "append",
// "delete"); another byte reads as itself.
func (k ChangeKind) String() string {
	switch k {
	case ChangeCreate:
		return "create"
	case ChangeAppend:
		return "append"
	case ChangeDelete:
		return "delete"
	}
	return string(rune(k))
}

// ParseChangeKind reads field k of a change-log entry.
func ParseChangeKind(k string) (ChangeKind, bool) {
	if len(k) != 1 {
		return 0, false
	}
	switch ck := ChangeKind(k[0]); ck {
	case ChangeCreate, ChangeAppend, ChangeDelete:
		return ck, true
	}
	return 0, false
}

// SessionRef names a session: its app, user and id, one value from the
// script call to the SQL row. Its db tags name the key columns of the
// database's bookkeeping tables (queries of sessions select id AS
// session_id), so that persist scans rows into it.
type SessionRef struct {
	App  string `db:"app_name"`
	User string `db:"user_id"`
	ID   string `db:"session_id"`
}

// String names the session in messages: "session <id> of app <app>, user
// <user>" (SessionName).
func (r SessionRef) String() string { return SessionName(r.App, r.User, r.ID) }

// StateOwner is whose state a state hash or row holds: a user of an app,
// or (User "") the app itself.
type StateOwner struct{ App, User string }

// IsApp reports whether the owner is the app (its app: state).
func (o StateOwner) IsApp() bool { return o.User == "" }

// String names the owner in messages: "user <user> of app <app>" or "app <app>".
func (o StateOwner) String() string {
	if o.IsApp() {
		return "app " + o.App
	}
	return "user " + o.User + " of app " + o.App
}
