package cache

import (
	"context"
	"sync"
	"sync/atomic"

	"github.com/redis/go-redis/v9"
)

// Group commit. Concurrent script calls share round trips: while maxInFlight
// pipelines are out, new calls queue; the goroutine whose pipeline comes
// back hands the queue, as one pipeline, to the first queued caller, which
// sends it and answers the rest. Each script still runs atomically on its
// own and each caller gets its own reply or error. A call that finds a
// pipeline slot free goes out at once, alone, on the same path as without
// group commit, so one caller waits no longer than before. In a cluster,
// go-redis splits a pipeline by node and sends the parts concurrently.
const (
	maxInFlight = 4   // pipelines out at once
	maxBatch    = 256 // script calls per pipeline
)

// committer groups the script calls of one Store.
type committer struct {
	rdb redis.UniversalClient

	mu       sync.Mutex
	inFlight int
	queue    []*scriptCall

	calls, batches atomic.Int64 // script calls sent, and the round trips they took
}

// CommitStats counts the write-script calls of a Store and the round trips
// they took: calls / batches is how many calls shared a round trip.
type CommitStats struct {
	Calls, Batches int64
}

// CommitStats reports the group commit's counters since the Store was made.
func (s *Store) CommitStats() CommitStats {
	return CommitStats{Calls: s.commit.calls.Load(), Batches: s.commit.batches.Load()}
}

// scriptCall is one script call and, once it has run, its reply.
type scriptCall struct {
	ctx  context.Context
	sc   *evalForm
	line []any // evalLine
	cmd  *redis.Cmd
	// wake (queued calls only) gets the batch this caller is to send, or nil
	// once cmd holds the reply.
	wake chan []*scriptCall
}

// run runs a script call (its evalLine) and returns its reply.
func (c *committer) run(ctx context.Context, sc *evalForm, line []any) *redis.Cmd {
	c.mu.Lock()
	if c.inFlight < maxInFlight {
		c.inFlight++
		c.mu.Unlock()
		c.calls.Add(1)
		c.batches.Add(1)
		cmd := c.runOne(ctx, sc, line)
		c.handOff()
		return cmd
	}
	call := &scriptCall{ctx: ctx, sc: sc, line: line, wake: make(chan []*scriptCall, 1)}
	c.queue = append(c.queue, call)
	c.mu.Unlock()
	if batch := <-call.wake; batch != nil {
		c.send(batch)
	}
	return call.cmd
}

// send runs a batch whose first call is the caller's own, hands what queued
// meanwhile to the next sender, and answers the others of the batch.
func (c *committer) send(batch []*scriptCall) {
	c.calls.Add(int64(len(batch)))
	c.batches.Add(1)
	if len(batch) == 1 {
		batch[0].cmd = c.runOne(batch[0].ctx, batch[0].sc, batch[0].line)
	} else {
		c.pipeline(batch)
	}
	c.handOff()
	for _, call := range batch[1:] {
		call.wake <- nil
	}
}

// runOne runs one script call on its own: EVALSHA, then EVAL when the node
// did not know the script.
func (c *committer) runOne(ctx context.Context, sc *evalForm, line []any) *redis.Cmd {
	cmd := sc.command(ctx, line, false)
	_ = c.rdb.Process(ctx, cmd)
	if isNoScript(cmd.Err()) {
		cmd = sc.command(ctx, line, true)
		_ = c.rdb.Process(ctx, cmd)
	}
	return cmd
}

// handOff ends a pipeline slot's round trip: what queued meanwhile goes,
// as one batch, to its first caller to send; with nothing queued the slot
// is free.
func (c *committer) handOff() {
	c.mu.Lock()
	var next []*scriptCall
	if n := min(len(c.queue), maxBatch); n > 0 {
		next = append([]*scriptCall(nil), c.queue[:n]...)
		c.queue = append(c.queue[:0], c.queue[n:]...)
	} else {
		c.inFlight--
	}
	c.mu.Unlock()
	if next != nil {
		next[0].wake <- next
	}
}

// pipeline sends the calls of a batch in one pipeline (EVALSHA, then EVAL
// for those a node did not know, as after SCRIPT FLUSH or a failover). The
// callers' contexts are not the batch's: it runs under the client's own
// timeouts, so one caller giving up does not fail the others' calls.
func (c *committer) pipeline(batch []*scriptCall) {
	ctx := context.WithoutCancel(batch[0].ctx)
	pipe := c.rdb.Pipeline()
	for _, call := range batch {
		call.cmd = call.sc.command(ctx, call.line, false)
		_ = pipe.Process(ctx, call.cmd)
	}
	_, _ = pipe.Exec(ctx)
	var again []*scriptCall
	for _, call := range batch {
		if isNoScript(call.cmd.Err()) {
			again = append(again, call)
		}
	}
	if len(again) == 0 {
		return
	}
	pipe = c.rdb.Pipeline()
	for _, call := range again {
		call.cmd = call.sc.command(ctx, call.line, true)
		_ = pipe.Process(ctx, call.cmd)
	}
	_, _ = pipe.Exec(ctx)
}
