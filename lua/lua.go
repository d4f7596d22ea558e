// Package lua holds adksession's Redis scripts, one file per script, each
// starting with its contract (KEYS, ARGV, returns). The write-behind's own
// scripts start with the Redis 7 shebang "#!lua flags=allow-oom", so that
// they run when Redis is full, and the scripts that add data with "#!lua",
// so that a full Redis refuses them before their first write (package cache
// runs them without it on servers that cannot compile it). Every script receives all
// its keys in KEYS and touches keys of one hash slot only, so the same scripts
// run on standalone Redis and on Redis Cluster. Of lib.lua (input checks,
// commands in chunks that Lua's unpack can take) and index.lua (the
// compaction index), each script gets in front of it the helpers it uses.
// Package cache wraps them.
//
// It is internal to adksession: the scripts, their KEYS and ARGV, change with
// the key layout (docs/redis-keys.md is the contract for tools that read
// Redis). Programs use package service.
package lua

import (
	_ "embed"
	"regexp"
	"slices"
	"strings"
	"unicode"
)

//go:embed lib.lua
var lib string

//go:embed index.lua
var indexLib string

// helpers are the top-level definitions of lib.lua and index.lua, in order.
// A script gets in front of it only those it uses, directly or through
// another: Redis runs a script's whole text on every call, and each
// function or table defined costs it an allocation and a few hundred
// instructions, whether the script calls it or not.
var helpers = append(definitions(lib), definitions(indexLib)...)

// withLib puts in front of a script's text, after its shebang line (a Redis
// 7 "#!lua flags=..." line must stay first), the helpers it uses.
func withLib(script string) string {
	return withHelpers(script, helpers)
}

// definition is one top-level definition of a helper file ("local function
// name(" or "local NAME ="), with the comment lines above it and its body.
type definition struct {
	names []string
	text  string
}

var definitionLine = regexp.MustCompile(`^local (?:function )?([A-Za-z_][A-Za-z0-9_]*(?:, *[A-Za-z_][A-Za-z0-9_]*)*)`)

// definitions cuts a helper file into its top-level definitions. A comment
// at the start of a line goes with the definition below it; the indented
// lines and the "end" that follow a definition are its body. Comments
// before the first definition (the file's header) are left out.
func definitions(src string) []definition {
	var out []definition
	var comments strings.Builder
	for _, line := range strings.SplitAfter(src, "\n") {
		switch m := definitionLine.FindStringSubmatch(line); {
		case m != nil:
			var names []string
			for _, n := range strings.Split(m[1], ",") {
				names = append(names, strings.TrimSpace(n))
			}
			out = append(out, definition{names: names, text: comments.String() + line})
			comments.Reset()
		case strings.HasPrefix(line, "--") || (comments.Len() > 0 && strings.TrimSpace(line) == ""):
			comments.WriteString(line)
		case len(out) > 0 && comments.Len() == 0:
			out[len(out)-1].text += line
		case strings.TrimSpace(line) != "":
			panic("lua: a helper file's top-level line is neither a definition, its body, nor a comment: " + line)
		}
	}
	return out
}

// withHelpers puts in front of script the definitions of defs it uses,
// directly or through another, in their order (a Lua local is seen only
// after its definition).
func withHelpers(script string, defs []definition) string {
	used := make([]bool, len(defs))
	for pending := []string{script}; len(pending) > 0; {
		names := identifiers(pending[0])
		pending = pending[1:]
		for i, d := range defs {
			if !used[i] && slices.ContainsFunc(d.names, func(n string) bool { return names[n] }) {
				used[i] = true
				pending = append(pending, d.text)
			}
		}
	}
	var prefix strings.Builder
	for i, d := range defs {
		if used[i] {
			prefix.WriteString(d.text)
		}
	}
	return withPrefix(prefix.String(), script)
}

// identifiers returns the names Lua code uses: its identifiers outside
// comments and string literals (field names after a dot count too, which
// only ever adds a definition).
func identifiers(code string) map[string]bool {
	out := map[string]bool{}
	for i := 0; i < len(code); {
		c := code[i]
		switch {
		case c == '-' && strings.HasPrefix(code[i:], "--"):
			if j := strings.IndexByte(code[i:], '\n'); j >= 0 {
				i += j
			} else {
				i = len(code)
			}
		case c == '\'' || c == '"':
			for i++; i < len(code) && code[i] != c; i++ {
				if code[i] == '\\' {
					i++
				}
			}
			i++
		case c == '_' || unicode.IsLetter(rune(c)):
			j := i
			for j < len(code) && (code[j] == '_' || unicode.IsLetter(rune(code[j])) || unicode.IsDigit(rune(code[j]))) {
				j++
			}
			out[code[i:j]] = true
			i = j
		default:
			i++
		}
	}
	return out
}

func withPrefix(prefix, script string) string {
	if strings.HasPrefix(script, "#!") {
		line, rest, _ := strings.Cut(script, "\n")
		return line + "\n" + prefix + rest
	}
	return prefix + script
}

var (
	//go:embed create.lua
	createSrc string
	//go:embed append.lua
	appendSrc string
	//go:embed get.lua
	getSrc string
	//go:embed delete.lua
	deleteSrc string
	//go:embed end_invocation.lua
	endInvocationSrc string
	//go:embed app_order.lua
	appOrderSrc string
	//go:embed app_apply.lua
	appApplySrc string
	//go:embed flushed.lua
	flushedSrc string
	//go:embed hydrate.lua
	hydrateSrc string
	//go:embed hydrate_state.lua
	hydrateStateSrc string
	//go:embed hydrate_index.lua
	hydrateIndexSrc string
	//go:embed lease_acquire.lua
	leaseAcquireSrc string
	//go:embed ack.lua
	ackSrc string
	//go:embed state_dead.lua
	stateDeadSrc string
	//go:embed lease_release.lua
	leaseReleaseSrc string
	//go:embed rewind.lua
	rewindSrc string
	//go:embed fork.lua
	forkSrc string
	//go:embed state_read.lua
	stateReadSrc string
	//go:embed compacted_calls.lua
	compactedCallsSrc string
	//go:embed index_build.lua
	indexBuildSrc string
)

// The scripts, each with the helpers of lib.lua and index.lua it uses in front.
var (
	// Create creates a session; see create.lua.
	Create = withLib(createSrc)
	// Append appends an event and applies its state delta; see append.lua.
	Append = withLib(appendSrc)
	// Get reads a session with a window of events; see get.lua.
	Get = withLib(getSrc)
	// Delete deletes a session; see delete.lua.
	Delete = withLib(deleteSrc)
	// EndInvocation drops an invocation's temp state; see end_invocation.lua.
	EndInvocation = withLib(endInvocationSrc)
	// AppOrder takes the order number of an app-state change; see app_order.lua.
	AppOrder = withLib(appOrderSrc)
	// AppApply applies an app-state delta once, in order; see app_apply.lua.
	AppApply = withLib(appApplySrc)
	// Flushed records what the flusher wrote; see flushed.lua.
	Flushed = withLib(flushedSrc)
	// Hydrate puts a session read from the database back; see hydrate.lua.
	Hydrate = withLib(hydrateSrc)
	// HydrateState puts user or app state read from the database back; see hydrate_state.lua.
	HydrateState = withLib(hydrateStateSrc)
	// HydrateIndex completes a user's session index that Redis lost; see hydrate_index.lua.
	HydrateIndex = withLib(hydrateIndexSrc)
	// LeaseAcquire takes or renews a flusher's shard lease; see lease_acquire.lua.
	LeaseAcquire = withLib(leaseAcquireSrc)
	// Ack removes handled change-log entries and records dead letters; see ack.lua.
	Ack = withLib(ackSrc)
	// StateDead records a dead-lettered user or app state revision; see state_dead.lua.
	StateDead = withLib(stateDeadSrc)
	// LeaseRelease gives up a flusher's shard lease; see lease_release.lua.
	LeaseRelease = withLib(leaseReleaseSrc)
	// Rewind appends a rewind event restoring an earlier state; see rewind.lua.
	Rewind = withLib(rewindSrc)
	// Fork creates a session from another's events before an invocation; see fork.lua.
	Fork = withLib(forkSrc)
	// StateRead is the flusher's read of a user's state, counted; see state_read.lua.
	StateRead = withLib(stateReadSrc)
	// CompactedCalls is the second step of a compacted view reaching below the cached tail; see compacted_calls.lua.
	CompactedCalls = withLib(compactedCallsSrc)
	// IndexBuild builds a session's compaction index from its history, a chunk per call; see index_build.lua.
	IndexBuild = withLib(indexBuildSrc)
)
