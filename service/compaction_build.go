package service

import (
	"context"
	"time"

	"github.com/adksession/adksession/cache"
	"github.com/adksession/adksession/cache/base/startstop"
)

// indexBuildTimeout bounds one background build of a compaction index.
const indexBuildTimeout = 2 * time.Minute

// indexBuilds rebuilds in the background the Redis compaction index of a
// session whose compacted view a cold read walked from the database's
// indexes (viewFromDatabase): the walk answers in O(log n + k) but builds no
// index, which takes every event, so the build reads the whole history
// after the read has answered, and the next compacted reads are the
// index's. One build runs at a time per Service: a walk while one runs asks
// for none (a later walk of that session asks again). A build that fails
// (the session moved on, Redis is full, the database is down) fails no read
// and leaves no index. Close cancels a running build and waits for it.
type indexBuilds struct {
	life startstop.Base
}

// buildIndexLater starts the background build of a's session's index
// unless one runs or the service is closing.
func (s *Service) buildIndexLater(a cache.GetArgs) {
	if s.cfg.DisableIndexBuilds {
		return
	}
	s.indexBuilds.life.Start(context.Background(), func(ctx context.Context) {
		ctx, cancel := context.WithTimeout(ctx, indexBuildTimeout)
		defer cancel()
		if err := s.buildIndexNow(ctx, a); err != nil && ctx.Err() == nil {
			s.cfg.Logger.Debug("adksession: compaction index not built", "app", a.App, "user", a.User, "session", a.ID, "err", err)
		}
	})
}

// buildIndexNow reads a's session whole (Redis's tail, the database's older
// events) and builds its compaction index from it.
func (s *Service) buildIndexNow(ctx context.Context, a cache.GetArgs) error {
	a.Compacted, a.NumRecent, a.After, a.InvocationID = false, 0, -1, ""
	snap, err := s.loader.Get(ctx, a)
	if err != nil {
		return err
	}
	events, err := decodeEvents(snap.Events)
	if err != nil {
		return err
	}
	return s.buildIndex(ctx, a, snap, events)
}

// stopIndexBuilds cancels a running build and waits for it; none starts
// after.
func (s *Service) stopIndexBuilds() { s.indexBuilds.life.Stop() }
