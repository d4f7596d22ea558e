// Package lua holds adksession's Redis scripts, one file per script, each
// starting with its contract (KEYS, ARGV, returns). The write-behind's own
// scripts start with the Redis 7 shebang "#!lua flags=allow-oom", so that
// they run when Redis is full (package cache runs them without it on servers
// that cannot compile it). Every script receives all
// its keys in KEYS and touches keys of one hash slot only, so the same scripts
// run on standalone Redis and on Redis Cluster. Package cache wraps them.
package lua

import (
	_ "embed"
	"strings"
)

// Create creates a session; see create.lua.
//
//go:embed create.lua
var Create string

// Append appends an event and applies its state delta; see append.lua.
//
//go:embed append.lua
var Append string

// Get reads a session with a window of events; see get.lua.
//
//go:embed get.lua
var Get string

// Delete deletes a session; see delete.lua.
//
//go:embed delete.lua
var Delete string

// EndInvocation drops an invocation's temp state; see end_invocation.lua.
//
//go:embed end_invocation.lua
var EndInvocation string

// AppApply applies an app-state delta once; see app_apply.lua.
//
//go:embed app_apply.lua
var AppApply string

// Flushed records what the flusher wrote; see flushed.lua.
//
//go:embed flushed.lua
var Flushed string

// Hydrate puts a session read from the database back; see hydrate.lua.
//
//go:embed hydrate.lua
var Hydrate string

// HydrateState puts user or app state read from the database back; see hydrate_state.lua.
//
//go:embed hydrate_state.lua
var HydrateState string

// HydrateIndex completes a user's session index that Redis lost; see hydrate_index.lua.
//
//go:embed hydrate_index.lua
var HydrateIndex string

// LeaseAcquire takes or renews a flusher's shard lease; see lease_acquire.lua.
//
//go:embed lease_acquire.lua
var LeaseAcquire string

// LeaseRelease gives up a flusher's shard lease; see lease_release.lua.
//
//go:embed lease_release.lua
var LeaseRelease string

// Ack removes handled change-log entries and records dead letters; see ack.lua.
//
//go:embed ack.lua
var Ack string

// StateDead records a dead-lettered user or app state revision; see state_dead.lua.
//
//go:embed state_dead.lua
var StateDead string

// Rewind appends a rewind event restoring an earlier state; see rewind.lua.
//
//go:embed rewind.lua
var Rewind string

// AppendCeiling is append.lua with the handle's revision read from the
// session instead of ARGV[1], so that any number of calls with the same
// arguments append: the same Redis work as an append, for measuring the
// ceiling (redis-benchmark EVALSHA) that benchmarks compare against.
func AppendCeiling() string {
	const from, to = "local handle = tonumber(ARGV[1])", "local handle = rev"
	if strings.Count(Append, from) != 1 {
		panic("lua/append.lua no longer reads the handle's revision from ARGV[1]: update AppendCeiling")
	}
	return strings.Replace(Append, from, to, 1)
}
