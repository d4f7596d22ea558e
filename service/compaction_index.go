package service

import (
	"encoding/json"
	"strconv"
	"strings"
)

// indexScoreLimit bounds the compaction times the index takes as numbers:
// Redis scores and Lua numbers hold integers exactly below 2^53.
const indexScoreLimit = 1 << 53

// compactionIndexEntry is what the compaction index (docs/design.md, "The
// compacted view", and index.lua's index_event) keeps of an event as it is
// stored: entries one after another, each a tag, the length of its value in
// bytes, ':' and the value (the undo records' format):
//
//	h     the event carries actions.compaction (ADK Python's form)
//	k     a plain compaction (no branch, no scope, a content ADK's filter
//	      keeps) whose range reads: "<start µs> <end µs>"
//	n     the event is read with every view: a compaction that covers
//	      nothing (branch, scope, content ADK's filter drops, times out of
//	      range) or an event with an isolation scope
//	s     its isolation scope
//	c, o  a function call id of its content; o: a call with arguments
//	r     a function response id of its content
//	p     a response id a kept copy of it answers (its compacted content's
//	      for a compaction, its content's otherwise)
//	j     an ADK JS compacted event, its endTime in µs ("" when it does not
//	      read as a time: then every event is read)
//	w     the invocation it rewinds before
//
// An event the index needs nothing of has the empty entry.
func compactionIndexEntry(e *Event) string {
	var b strings.Builder
	put := func(tag byte, v string) {
		b.WriteByte(tag)
		b.WriteString(strconv.Itoa(len(v)))
		b.WriteByte(':')
		b.WriteString(v)
	}
	if x := e.Actions.RewindBeforeInvocationID; x != "" {
		put('w', x)
	}
	scope, scoped := isolationScope(e)
	if scoped {
		put('n', "")
		put('s', scope)
	}
	// The responses a kept copy of it answers: a compaction's compacted
	// content's (answered), any other event's own.
	var answered json.RawMessage
	own := true
	if hasCompaction(e) {
		put('h', "")
		if r, ok := pythonCompaction(e); ok {
			answered, own = r.content, false
			switch {
			case scoped:
			case e.Branch != "" || droppedByContent(e) || !inScore(r.start) || !inScore(r.end):
				put('n', "")
			default:
				put('k', strconv.FormatInt(r.start, 10)+" "+strconv.FormatInt(r.end, 10))
			}
		}
	}
	for _, p := range contentParts(e.Content) {
		if c := p.FunctionCall; c != nil {
			if c.ID != "" {
				put('c', c.ID)
			}
			if len(c.Args) > 0 {
				put('o', c.ID)
			}
		}
		if r := p.FunctionResponse; r != nil && r.ID != "" {
			put('r', r.ID)
			if own {
				put('p', r.ID)
			}
		}
	}
	if !own {
		for _, p := range contentParts(answered) {
			if r := p.FunctionResponse; r != nil && r.ID != "" {
				put('p', r.ID)
			}
		}
	}
	if isJSCompacted(e) {
		end := ""
		if t, err := parseEpoch(e.Extra["endTime"]); err == nil && len(e.Extra["endTime"]) > 0 {
			if us := t.UnixMicro(); inScore(us) {
				end = strconv.FormatInt(us, 10)
			}
		}
		put('j', end)
	}
	return b.String()
}

// inScore reports whether µs is a number the index keeps exactly.
func inScore(us int64) bool { return us > -indexScoreLimit && us < indexScoreLimit }

// answeredContent is the content whose responses a kept copy of e answers:
// its compacted content for a compaction ADK reads, its content otherwise.
func answeredContent(e *Event) json.RawMessage {
	if r, ok := pythonCompaction(e); ok {
		return r.content
	}
	return e.Content
}
