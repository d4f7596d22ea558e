package bench

import (
	"context"
	"errors"

	"github.com/redis/go-redis/v9"

	"github.com/adksession/adksession/cache"
	"github.com/adksession/adksession/cache/scriptbench"
)

// redisStats reads Redis's script time (INFO commandstats) around a run's
// append phase.
type redisStats struct {
	rdb                        redis.UniversalClient
	calls0, usec0, calls, usec int64
	err                        error
}

func newRedisStats(redisURL string) (*redisStats, error) {
	rdb, err := cache.NewClient(redisURL)
	if err != nil {
		return nil, err
	}
	return &redisStats{rdb: rdb}, nil
}

// phase is loadgen.Config.AppendPhase: a reading at the start and the end.
func (s *redisStats) phase(ctx context.Context) func(started bool) {
	return func(started bool) {
		calls, usec, err := scriptbench.EvalshaStats(ctx, s.rdb)
		if started {
			s.calls0, s.usec0, s.err = calls, usec, err
		} else if s.err == nil {
			s.calls, s.usec, s.err = calls, usec, err
		}
	}
}

// perAppend is the EVALSHA time between the readings per append, µs: the
// appends' scripts, and whatever else ran scripts on that Redis meanwhile
// (a flusher of this process).
func (s *redisStats) perAppend(appends int64) (float64, error) {
	if s.err != nil {
		return 0, s.err
	}
	if appends == 0 || s.calls <= s.calls0 {
		return 0, errors.New("no scripts ran")
	}
	return float64(s.usec-s.usec0) / float64(appends), nil
}

// Close closes the connection.
func (s *redisStats) Close() error { return s.rdb.Close() }
