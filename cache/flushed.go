package cache

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/adksession/adksession/cache/base"
)

// Flushed is what the flusher wrote of one session. Every write here works
// when Redis is full (the scripts are allowed then): it is what makes memory
// evictable again.
type Flushed struct {
	base.SessionRef
	Incarnation int64
	// Seq is the last seq written; -1 when nothing of the session was (the
	// database refused it: its keys keep no TTL).
	Seq     int64
	Deleted bool  // a flushed delete (Seq is ignored)
	UserRev int64 // user-state revision written; -1 when none
	// Rebased and UserRebased: the session (its user's state) was out of
	// step with the database and written rebased onto it
	// (persist.Outcome): its keys go instead of getting a TTL once fully
	// flushed, and a user hash still holding unflushed writes is marked
	// m:rb so that the next flushes rebase it too.
	Rebased, UserRebased bool
	// Hold changes the count of the session's dead letters whose events
	// the database lacks (m:hold): + for entries dead-lettered with the
	// session's row refused and its events not written, - for such entries
	// retried and written. While it is above 0 the session's keys get no
	// TTL and its events are not trimmed: Redis alone holds those events.
	Hold int
	// EventID is the id of the event at Seq ("" when the batch wrote
	// none): a copy whose seq Seq is another event (Redis came back older
	// and numbered over it) is not marked.
	EventID string
	// UserFlush is the user hash's flush count read with UserRev (0:
	// unknown): an older copy of the hash is not marked.
	UserFlush int64
	// UpdateTime is the update time (µs) the batch wrote into the
	// session's row, 0 when it wrote none. The user's index takes it when
	// Redis's copy holds nothing newer: the copy goes once flushed
	// (rebased), is older than the batch, or is gone, and a listing then
	// shows the database's time (docs/design.md, "Indexes and lists").
	UpdateTime int64
}

// MarkFlushed records flushed sessions (one pipeline of flushed.lua calls):
// idle, fully flushed keys get ttl (a flushed user's index with its state),
// events beyond keep are trimmed, flushed sessions leave the app index,
// flushed tombstones are removed.
func (s *Store) MarkFlushed(ctx context.Context, done []Flushed, ttl time.Duration, keep int) error {
	if len(done) == 0 {
		return nil
	}
	sc := s.pick(flushedScript)
	run := func(eval func(redis.Pipeliner, []string, ...any) *redis.Cmd) ([]*redis.Cmd, error) {
		pipe := s.rdb.Pipeline()
		cmds := make([]*redis.Cmd, len(done))
		for i, d := range done {
			k := s.keys.Session(d.App, d.User, d.ID)
			seq, urev := "", ""
			switch {
			case d.Deleted:
				seq = "d"
			case d.Seq >= 0:
				seq = strconv.FormatInt(d.Seq, 10)
			}
			if d.UserRev >= 0 {
				urev = strconv.FormatInt(d.UserRev, 10)
			}
			rebased := ""
			if d.Rebased {
				rebased = "s"
			}
			if d.UserRebased {
				rebased += "u"
			}
			cmds[i] = eval(pipe, []string{k.Session, k.Events, k.User, k.Undo, k.UserIndex, k.AppIndex, k.EventIDs,
				s.keys.ShardKeys(k.Shard).Guards, k.Temp},
				d.Incarnation, seq, urev, ttl.Milliseconds(), keep, AppIndexMember(d.User, d.ID),
				GuardField(d.SessionRef), GuardField(base.SessionRef{App: d.App, User: d.User}), rebased, d.Hold, d.EventID, d.UserFlush, updateTimeArg(d.UpdateTime), d.ID)
		}
		_, err := pipe.Exec(ctx)
		return cmds, err
	}
	cmds, err := run(func(p redis.Pipeliner, keys []string, args ...any) *redis.Cmd {
		return sc.EvalSha(ctx, p, keys, args...)
	})
	if err != nil && isNoScript(cmds[0].Err()) {
		_, err = run(func(p redis.Pipeliner, keys []string, args ...any) *redis.Cmd {
			return sc.Eval(ctx, p, keys, args...)
		})
	}
	if err != nil {
		return fmt.Errorf("mark flushed: %w", err)
	}
	return nil
}

// updateTimeArg is flushed.lua's ARGV[13]: "" for none.
func updateTimeArg(ut int64) string {
	if ut == 0 {
		return ""
	}
	return strconv.FormatInt(ut, 10)
}

// Units of a dead letter: what the database (or the flusher) refused.
const (
	DeadEntry     = "entry"      // a change-log entry that cannot be read
	DeadEvent     = "event"      // one event
	DeadSession   = "session"    // a session's row (its state or meta)
	DeadUserState = "user state" // a user_states row
	DeadAppState  = "app state"  // an app_states row
)

// DeadLetter is what the database refused for good (or what could not be
// read), kept in the shard's dead-letter list for operators.
type DeadLetter struct {
	Change Change // the change-log entry it came with
	Unit   string // DeadEntry, DeadEvent, ...
	Reason string
	// Data is what was refused, as Redis holds it: "event" (the event
	// JSON) and "seq" for an event, "state" and "rev" for a state.
	Data map[string]any
}

// record is the JSON a dead letter is stored as.
func (d DeadLetter) record(now time.Time) string {
	m := map[string]any{}
	maps.Copy(m, d.Data)
	maps.Copy(m, map[string]any{"id": d.Change.EntryID, "fields": d.Change.Fields, "unit": d.Unit, "reason": d.Reason,
		"time": now.UTC().Format(time.RFC3339Nano)})
	b, err := json.Marshal(m)
	if err != nil {
		b, _ = json.Marshal(map[string]any{"id": d.Change.EntryID, "unit": d.Unit, "reason": d.Reason + " (record: " + err.Error() + ")"})
	}
	return string(b)
}

// Ack removes handled entries (flushed or dead-lettered) from a shard's
// change log, after appending the dead letters to its dead-letter list, in
// one script.
func (s *Store) Ack(ctx context.Context, shard int, ids []string, dead []DeadLetter) error {
	if len(ids)+len(dead) == 0 {
		return nil
	}
	k := s.keys.ShardKeys(shard)
	now := time.Now()
	args := make([]any, 0, 1+2*len(dead)+len(ids))
	args = append(args, len(dead))
	for _, d := range dead {
		args = append(args, d.Change.EntryID, d.record(now))
	}
	for _, id := range ids {
		args = append(args, id)
	}
	if err := s.run(ctx, ackScript, []string{k.Log, k.Dead}, args...).Err(); err != nil {
		return fmt.Errorf("acknowledge changes of shard %d: %w", shard, err)
	}
	return nil
}

// MarkStateDead records in a user's state hash (an app's with user "")
// that revision rev was dead-lettered, so that no flusher refuses it again
// until it changes.
func (s *Store) MarkStateDead(ctx context.Context, app, user string, rev int64) error {
	key := s.keys.App(app).State
	if user != "" {
		key = s.keys.Session(app, user, "").User
	}
	if err := s.run(ctx, stateDeadScript, []string{key}, rev).Err(); err != nil {
		return fmt.Errorf("mark state of %s/%s dead-lettered: %w", app, user, err)
	}
	return nil
}
