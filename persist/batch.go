package persist

import (
	"encoding/json"
	"time"

	"github.com/adksession/adksession/cache/base"
)

// EventRow is one row of the events table.
type EventRow struct {
	// Key is the event's session. Apply ignores it and uses the key of the
	// SessionUpsert that carries the event; the loads fill it.
	Key          base.SessionRef
	ID           string
	InvocationID string
	// Timestamp is UTC with microsecond precision, strictly increasing within
	// a session (the caller guarantees it), so that SQL order by timestamp is
	// append order.
	Timestamp time.Time
	// Seq is the per-session sequence number, 1, 2, 3... (Redis's, in a
	// batch: a rebased session's events keep it, docs/design.md).
	Seq int64
	// LogPos orders the events of a batch across its sessions: the position
	// in the change log of the entry that logged the event (a rebased
	// user's deltas apply in that order).
	LogPos int
	// Copied: the event is a copy of another session's (a fork), whose
	// user: keys a rebased user does not take for new writes.
	Copied bool
	// Data is the event_data JSON object, snake_case storage form. Apply sets
	// its "id", "invocation_id" and "timestamp" (epoch milliseconds) to the
	// column values and keeps every other member byte for byte; the loads
	// return it as stored.
	Data []byte
	// ValidJSON: the loads read Data from a column that holds only valid
	// JSON (Postgres's jsonb), so a reader need not check it again.
	ValidJSON bool
	// Prepared is what the Prepare function of a load (LoadSessionEvents)
	// made of the row while the rows were coming in; "" when it had none or
	// did not see the row (a time outside the range served, see dbTime).
	Prepared string
}

// Prepare makes of an events row what its reader needs (a cold read: the
// event in the cache's form). A load calls it on each row on a goroutine of
// its own while the rest are still coming in, so that the work takes the
// time the database takes to send them.
type Prepare func(r *EventRow) (string, error)

// SessionUpsert is a snapshot of one session and the events that a batch
// adds to it.
type SessionUpsert struct {
	Key base.SessionRef
	// Incarnation is the create time in microseconds of this incarnation of
	// the id: a deleted then re-created id has a larger one.
	Incarnation int64
	// Rev is the seq of the last event included in this snapshot (0 right
	// after create).
	Rev int64
	// State holds the session-scoped keys only (no app:, user: or temp:
	// prefix), as JSON values; JSON null is kept.
	State                  map[string]json.RawMessage
	CreateTime, UpdateTime time.Time
	// CreateState is the session-scoped state the incarnation was created
	// with (what a rewind before its first event restores); nil when the
	// batch does not carry it, which keeps what the database has.
	CreateState map[string]json.RawMessage
	// Events are the events of this incarnation in this batch, in order.
	Events []EventRow
	// Flushed is the last seq Redis believes the database holds (m:fl when
	// the batch was read): an event at or below it that the database lacks
	// is late, one above it and at or below the row's rev was numbered over
	// the database's (docs/design.md, "Redis behind the database").
	Flushed int64
	// Rebase: Redis's copy of the session is known to be out of step with
	// the database (the flusher rebased it and kept it, holding unflushed
	// writes: m:rb): the batch is rebased whatever its seqs.
	Rebase bool
}

// SessionDelete deletes every incarnation of a session up to Incarnation.
type SessionDelete struct {
	Key         base.SessionRef
	Incarnation int64
	// At is when the delete was logged, in µs (0: unknown). The tombstone
	// records it (adksession_sessions.written_update): an event Redis's
	// older copy of the session acknowledged after it is dead-lettered
	// (Outcome.Conflicts), one logged before it was deleted with it.
	At int64
}

// StateUpsert is a snapshot of one app's (UserID "") or one user's state.
type StateUpsert struct {
	AppName string
	UserID  string // "" for app state
	// Rev orders the snapshots of one app or user: a snapshot is written only
	// over an older one.
	Rev int64
	// State holds the keys without their app: or user: prefix.
	State      map[string]json.RawMessage
	UpdateTime time.Time
	// Rebase: Redis's copy of this state is known to be out of step with
	// the database (its hash carries m:rb, docs/design.md): the row is
	// written as the database's state plus the batch's new deltas, not as
	// this snapshot. Only for a user's state.
	Rebase bool
	// Flush is the flush count of the user's Redis hash after this read
	// (m:fc, counted by the read itself; 0: unknown). At or below the count
	// the database recorded, Redis came back holding an older copy of the
	// hash: the row is rebased as with Rebase.
	Flush int64
	// Recorded is one above the greatest flush count of the hash that it
	// knew the database records when it was read (m:fr,
	// cache.StateRev.Recorded; 0: unknown). At or below the count the
	// database recorded, the hash is an older copy too, however many reads
	// whose batches never committed (the database down, a flusher that
	// died) counted Flush past the database's since.
	Recorded int64
	// Orders are, for an app's state, the order number of the change that
	// last wrote each key (cache.StateRev.Orders). Apply merges the
	// snapshot into the row key by key by these numbers (mergeApps), so an
	// older copy never puts older values back.
	Orders map[string]int64
	// Merged: set by Apply once the snapshot is merged; it is written
	// whatever its Rev.
	Merged bool
	// LogTail is, for a user's state, the last change-log entry when the
	// hash was read (cache.StateRev.LogTail).
	LogTail string
}

// Batch is what one Apply writes, in one transaction.
type Batch struct {
	Deletes    []SessionDelete // applied first
	Sessions   []SessionUpsert
	UserStates []StateUpsert
	AppStates  []StateUpsert
	// Voided are creates of sessions a delete in the same batch removes:
	// no session row is written, but the create made its app's and user's
	// state rows, as ADK's does, and the batch creates them ({} when missing).
	Voided []VoidedCreate
	// UserWrites are the user: writes of the batch's changes that no event
	// of the batch carries: a create's initial user: keys, the events of a
	// session deleted (or created again) before the batch read it, and the
	// events its read of the session did not return (lost with Redis since:
	// an older copy of the session's keys came back while the user's hash
	// kept their writes) or that were dead-lettered.
	// Apply reads them only to rebase a user's state (docs/design.md,
	// "Redis behind the database"): Redis's snapshot of the hash holds
	// them otherwise.
	UserWrites []UserWrite
	// Outcome is set by Apply and ApplyEach: what they found while writing.
	Outcome Outcome
}

// UserWrite is the user: part of one change's delta (UserWrites).
type UserWrite struct {
	Key         base.SessionRef
	Incarnation int64
	// Seq is the event's seq and Ts its time in µs; 0 for a create.
	Seq, Ts int64
	// EventID is the event's id ("" for a create, and for a change logged
	// without it, before the log carried it).
	EventID string
	// LogPos is the change's position in the batch (EventRow.LogPos).
	LogPos int
	// Delta holds the keys without "user:", as JSON values.
	Delta map[string]json.RawMessage
}

// VoidedCreate is a create whose session a later delete removed before it
// was written.
type VoidedCreate struct {
	Key     base.SessionRef
	Created time.Time
}

// base.SessionRef is base.SessionRef (moving).
