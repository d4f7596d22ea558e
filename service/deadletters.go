package service

import (
	"context"
	"fmt"
	"time"

	"github.com/adksession/adksession/cache/base"
)

// DeadLetter is a change the flusher gave up on (the database refused it
// for good), as its shard's dead-letter list holds it.
type DeadLetter struct {
	Shard int
	// Entry is the dead letter's text: RetryDeadLetter and
	// DropDeadLetter name it by it.
	Entry string
	// ID is the id the change had in the change log; Kind is "create",
	// "append", "delete" (or the entry's own letter when unknown).
	ID, Kind                   string
	AppName, UserID, SessionID string
	// Unit is what was refused: "entry" (the change itself could not be
	// read), "event", "session", "user state" or "app state".
	Unit   string
	Reason string
	Time   time.Time // when it was dead-lettered
	// Fields are the change-log entry's fields (docs/redis-keys.md).
	Fields map[string]string
	// Conflict: an acknowledged event the database cannot take (it holds
	// another event under the id, or deleted the session); Entry holds the
	// event ("event"). RetryDeadLetter refuses it: append the event again
	// under a new id if it is wanted, then drop the letter.
	Conflict bool
}

// ShardDeadLetters are one shard's dead letters: how many, and the oldest.
type ShardDeadLetters struct {
	Shard   int
	Count   int64
	Letters []DeadLetter
}

// MaxDeadLettersListed bounds DeadLetters' limit.
const MaxDeadLettersListed = 1000

// DeadLetters lists, for every shard that has dead letters, how many and
// the oldest limit of them (1 to MaxDeadLettersListed), for operators.
func (s *Service) DeadLetters(ctx context.Context, limit int) ([]ShardDeadLetters, error) {
	if limit < 1 || limit > MaxDeadLettersListed {
		return nil, fmt.Errorf("%w: limit %d: must be in [1, %d]", ErrInvalidArgument, limit, MaxDeadLettersListed)
	}
	shards, err := s.cache.DeadLetters(ctx, limit)
	if err != nil {
		return nil, err
	}
	out := make([]ShardDeadLetters, len(shards))
	for i, sh := range shards {
		out[i] = ShardDeadLetters{Shard: sh.Shard, Count: sh.Count, Letters: make([]DeadLetter, len(sh.Letters))}
		for j, d := range sh.Letters {
			t, _ := time.Parse(time.RFC3339Nano, d.Time)
			kind := d.Fields["k"]
			if k, ok := base.ParseChangeKind(kind); ok {
				kind = k.String()
			}
			out[i].Letters[j] = DeadLetter{Shard: d.Shard, Entry: d.Entry, ID: d.ID, Kind: kind, Unit: d.Unit, Reason: d.Reason, Time: t,
				AppName: d.Fields["a"], UserID: d.Fields["u"], SessionID: d.Fields["i"], Fields: d.Fields, Conflict: d.Conflict}
		}
	}
	return out, nil
}

// RetryDeadLetter puts a dead letter's change back on its shard's change
// log, atomically with removing it from the list: the flusher applies it
// again as any change, reading the session as Redis holds it now (and
// dead-letters it again if the database still refuses it). ErrNotFound
// when the list no longer holds it (another operator handled it);
// ErrInvalidArgument when it holds no change, or is a Conflict.
func (s *Service) RetryDeadLetter(ctx context.Context, shard int, entry string) error {
	return s.cache.RetryDeadLetter(ctx, shard, entry)
}

// DropDeadLetter forgets a dead letter: what it would have written never
// reaches the database. ErrNotFound when the list no longer holds it.
func (s *Service) DropDeadLetter(ctx context.Context, shard int, entry string) error {
	return s.cache.DropDeadLetter(ctx, shard, entry)
}
