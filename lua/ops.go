package lua

// The scripts of operations: retention (prune) and dead letters.

import _ "embed"

// PruneFence fences an idle session before a prune deletes its rows; see prune_fence.lua.
//
//go:embed prune_fence.lua
var PruneFence string

// PruneUnfence lifts a prune's fence from a session it kept; see prune_unfence.lua.
//
//go:embed prune_unfence.lua
var PruneUnfence string

// PruneUser drops a pruned user's cached state and index; see prune_user.lua.
//
//go:embed prune_user.lua
var PruneUser string

// PruneApp drops a pruned app's cached state; see prune_app.lua.
//
//go:embed prune_app.lua
var PruneApp string

// DeadLetter retries or drops one dead letter; see dead_letter.lua.
//
//go:embed dead_letter.lua
var DeadLetter string
