package cache

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"sort"

	"github.com/redis/go-redis/v9"

	"github.com/adksession/adksession/cache/base"
	"github.com/adksession/adksession/lua"
)

var deadLetterScript = newScript(lua.DeadLetter)

// maxDeadLetterFields bounds the fields of a change-log entry a retry puts
// back (dead_letter.lua checks it too).
const maxDeadLetterFields = 64

// StoredDeadLetter is one dead letter as a shard's list holds it.
type StoredDeadLetter struct {
	Shard int
	// Entry is the dead letter's text: what RetryDeadLetter and
	// DropDeadLetter name it by.
	Entry  string
	ID     string            // id the change had in the change log
	Fields map[string]string // the change-log entry (k, a, u, i, ...)
	Unit   string            // what was refused: DeadEntry, DeadEvent, DeadSession, ...
	Reason string
	Time   string // when it was dead-lettered (RFC 3339)
	// Holds: a session unit whose events were not written; it counts in
	// the session's m:hold (its keys get no TTL while such letters are
	// outstanding: Redis alone holds their events).
	Holds bool
	// Conflict: an acknowledged event the database cannot take, as it
	// holds another event under its id or deleted its session (the letter
	// keeps the event, field "event"); it cannot be retried
	// (docs/operations.md, "Dead letters").
	Conflict bool
}

// ShardDeadLetters are a shard's dead letters: how many, and the oldest.
type ShardDeadLetters struct {
	Shard   int
	Count   int64
	Letters []StoredDeadLetter
}

// DeadLetters returns, for every shard that has dead letters, their count
// and the oldest limit of them (one pipeline of LLEN, then one of LRANGE).
func (s *Store) DeadLetters(ctx context.Context, limit int) ([]ShardDeadLetters, error) {
	pipe := s.rdb.Pipeline()
	lens := make([]*redis.IntCmd, s.keys.Shards())
	for i := range lens {
		lens[i] = pipe.LLen(ctx, s.keys.ShardKeys(i).Dead)
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return nil, fmt.Errorf("count dead letters: %w", err)
	}
	var out []ShardDeadLetters
	pipe = s.rdb.Pipeline()
	var ranges []*redis.StringSliceCmd
	for i, l := range lens {
		if l.Val() > 0 {
			out = append(out, ShardDeadLetters{Shard: i, Count: l.Val()})
			ranges = append(ranges, pipe.LRange(ctx, s.keys.ShardKeys(i).Dead, 0, int64(limit)-1))
		}
	}
	if len(out) == 0 || limit <= 0 {
		return out, nil
	}
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return nil, fmt.Errorf("read dead letters: %w", err)
	}
	for i := range out {
		for _, e := range ranges[i].Val() {
			out[i].Letters = append(out[i].Letters, parseDeadLetter(out[i].Shard, e))
		}
	}
	return out, nil
}

// parseDeadLetter reads what it can of a dead letter; one that is not the
// JSON the flusher writes keeps its text (and can be dropped).
func parseDeadLetter(shard int, entry string) StoredDeadLetter {
	d := StoredDeadLetter{Shard: shard, Entry: entry}
	var v struct {
		ID     string         `json:"id"`
		Fields map[string]any `json:"fields"`
		Unit   string         `json:"unit"`
		Reason string         `json:"reason"`
		Time   string         `json:"time"`
		// EventsWritten is set on session units (false: the events wait
		// in Redis for the retry).
		EventsWritten *bool `json:"events_written"`
		Conflict      bool  `json:"conflict"`
	}
	if err := json.Unmarshal([]byte(entry), &v); err != nil {
		d.Reason = "unreadable dead letter: " + err.Error()
		return d
	}
	d.ID, d.Unit, d.Reason, d.Time, d.Conflict = v.ID, v.Unit, v.Reason, v.Time, v.Conflict
	d.Holds = v.Unit == DeadSession && v.EventsWritten != nil && !*v.EventsWritten
	if len(v.Fields) > 0 {
		d.Fields = make(map[string]string, len(v.Fields))
		for k, f := range v.Fields {
			if s, ok := f.(string); ok {
				d.Fields[k] = s
			} else {
				b, _ := json.Marshal(f)
				d.Fields[k] = string(b)
			}
		}
	}
	return d
}

// RetryDeadLetter puts a dead letter's change-log entry back on its
// shard's change log and removes it from the list, atomically. base.ErrNotFound
// when the shard's list does not hold it (any more: another operator retried
// or dropped it); base.ErrInvalidArgument when it carries no change-log entry.
func (s *Store) RetryDeadLetter(ctx context.Context, shard int, entry string) error {
	d := parseDeadLetter(shard, entry)
	if d.Conflict {
		// The database keeps what it holds: a retry would find the same
		// conflict, or (Redis's copy gone) write nothing and lose the letter.
		return fmt.Errorf("%w: dead letter cannot be retried: the database keeps its own (%s); append the event again "+
			"under a new id if it is wanted (the letter holds it), then drop the letter", base.ErrInvalidArgument, d.Reason)
	}
	if len(d.Fields) == 0 || len(d.Fields) > maxDeadLetterFields {
		return fmt.Errorf("%w: dead letter cannot be retried: it holds %d change-log fields (want 1 to %d)", base.ErrInvalidArgument, len(d.Fields), maxDeadLetterFields)
	}
	fields := maps.Clone(d.Fields)
	if d.Holds {
		fields[heldField] = "1" // its flush releases the session's hold
	}
	names := make([]string, 0, len(fields))
	for k := range fields {
		names = append(names, k)
	}
	sort.Strings(names)
	args := []any{"retry", entry, 0, len(names)}
	for _, k := range names {
		args = append(args, k, fields[k])
	}
	return s.deadLetterAction(ctx, shard, d, args)
}

// DropDeadLetter removes a dead letter from its shard's list (base.ErrNotFound
// when the list does not hold it). A letter that held its session's keys
// (StoredDeadLetter.Holds) releases them.
func (s *Store) DropDeadLetter(ctx context.Context, shard int, entry string) error {
	d := parseDeadLetter(shard, entry)
	release := 0
	if d.Holds {
		release = 1
	}
	return s.deadLetterAction(ctx, shard, d, []any{"drop", entry, release, 0})
}

func (s *Store) deadLetterAction(ctx context.Context, shard int, d StoredDeadLetter, args []any) error {
	if shard < 0 || shard >= s.keys.Shards() {
		return fmt.Errorf("%w: dead letter in shard %d of %d", base.ErrNotFound, shard, s.keys.Shards())
	}
	k := s.keys.ShardKeys(shard)
	held := k.Dead // a key of the slot when the letter holds no session
	if d.Holds {
		held = s.keys.Session(d.Fields["a"], d.Fields["u"], d.Fields["i"]).Session
	}
	n, err := s.write(ctx, deadLetterScript, []string{k.Dead, k.Log, held}, args...).Int64()
	if err != nil {
		return fmt.Errorf("%s dead letter of shard %d: %w", args[0], shard, err)
	}
	if n == 0 {
		return fmt.Errorf("%w: dead letter in shard %d", base.ErrNotFound, shard)
	}
	return nil
}
