package lua

import _ "embed"

// The scripts of operations: retention (prune) and dead letters.

var (
	//go:embed prune_fence.lua
	pruneFenceSrc string
	//go:embed prune_unfence.lua
	pruneUnfenceSrc string
	//go:embed prune_user.lua
	pruneUserSrc string
	//go:embed prune_app.lua
	pruneAppSrc string
	//go:embed dead_letter.lua
	deadLetterSrc string
)

// The scripts of operations, each with the helpers of lib.lua it uses in front.
var (
	// PruneFence fences an idle session before a prune deletes its rows; see prune_fence.lua.
	PruneFence = withLib(pruneFenceSrc)
	// PruneUnfence lifts a prune's fence from a session it kept; see prune_unfence.lua.
	PruneUnfence = withLib(pruneUnfenceSrc)
	// PruneUser drops a pruned user's cached state and index; see prune_user.lua.
	PruneUser = withLib(pruneUserSrc)
	// PruneApp drops a pruned app's cached state; see prune_app.lua.
	PruneApp = withLib(pruneAppSrc)
	// DeadLetter retries or drops one dead letter; see dead_letter.lua.
	DeadLetter = withLib(deadLetterSrc)
)
