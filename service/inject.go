package service

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"regexp"
	"strconv"
	"strings"
	"unicode"
)

// ErrNoArtifactService: an instruction template names an artifact
// ({artifact.name}); adksession keeps no artifacts, so InjectState cannot
// fill it in.
var ErrNoArtifactService = errors.New("adksession: no artifact service to load an artifact for an instruction")

// placeholder is ADK's pattern: braces (one or more) around text without braces.
var placeholder = regexp.MustCompile(`\{+[^{}]*\}+`)

// InjectState fills an instruction template with session state, as ADK's
// inject_session_state does for a string instruction:
//
//   - {key} is replaced by the value of state key key; key is an identifier
//     (as Python's str.isidentifier), optionally with an app:, user: or
//     temp: prefix ("{app:greeting}"). Surrounding spaces and extra braces
//     are part of the placeholder: "{{key}}" and "{ key }" are {key}.
//   - {key?} is replaced by "" when the state has no key.
//   - A missing key without "?" is an error wrapping ErrStateKeyNotExist that
//     names the key.
//   - Braces around anything else (JSON examples, "{invalid-key}",
//     "{a:b:c}") are left as they are.
//   - {artifact.name} (with or without "?") is an error wrapping
//     ErrNoArtifactService: ADK raises the same when it has no artifact
//     service, and adksession stores no artifacts.
//
// Values: a string is inserted as is, null (or a nil value) as "" (as ADK),
// numbers in their shortest form without a trailing ".0" (30, not 30.0;
// 0.5; 1e+21 for very large ones), booleans as true/false, maps and lists
// as JSON (ADK inserts Python's str(): True, {'a': 1}; a Go program
// expects JSON). ctx is unused; it is there for an artifact service.
func InjectState(ctx context.Context, template string, sess *Session) (string, error) {
	if sess == nil {
		return "", nilArgument("session")
	}
	var firstErr error
	out := placeholder.ReplaceAllStringFunc(template, func(m string) string {
		if firstErr != nil {
			return m
		}
		s, err := fillPlaceholder(m, sess)
		if err != nil {
			firstErr = err
			return m
		}
		return s
	})
	if firstErr != nil {
		return "", firstErr
	}
	return out, nil
}

// fillPlaceholder returns what one matched placeholder becomes.
func fillPlaceholder(m string, sess *Session) (string, error) {
	name := strings.TrimSpace(strings.TrimRight(strings.TrimLeft(m, "{"), "}"))
	name, optional := strings.CutSuffix(name, "?")
	if file, ok := strings.CutPrefix(name, "artifact."); ok {
		return "", fmt.Errorf("%w: placeholder %s names artifact %q of %s", ErrNoArtifactService, m, file, sess.ref.String())
	}
	if !validStateName(name) {
		return m, nil
	}
	sess.mu.RLock()
	v, ok := sess.state[name]
	sess.mu.RUnlock()
	if !ok {
		if optional {
			return "", nil
		}
		return "", fmt.Errorf("%w: instruction placeholder {%s}: key %q in %s (write {%s?} to allow its absence)", ErrStateKeyNotExist, name, name, sess.ref.String(), name)
	}
	return formatStateValue(v)
}

// validStateName is ADK's _is_valid_state_name: an identifier, or a known
// prefix followed by an identifier.
func validStateName(name string) bool {
	prefix, rest, ok := strings.Cut(name, ":")
	if !ok {
		return isIdentifier(name)
	}
	switch prefix + ":" {
	case AppPrefix, UserPrefix, TempPrefix:
		return isIdentifier(rest)
	}
	return false
}

// isIdentifier approximates Python's str.isidentifier: a letter or '_',
// then letters, digits, '_' and combining marks.
func isIdentifier(s string) bool {
	if s == "" {
		return false
	}
	for i, r := range s {
		switch {
		case r == '_' || unicode.IsLetter(r) || unicode.Is(unicode.Nl, r):
		case i > 0 && (unicode.IsDigit(r) || unicode.In(r, unicode.Mn, unicode.Mc, unicode.Nd, unicode.Pc)):
		default:
			return false
		}
	}
	return true
}

// formatStateValue renders a state value for an instruction.
func formatStateValue(v any) (string, error) {
	switch x := v.(type) {
	case nil:
		return "", nil
	case string:
		return x, nil
	case bool:
		return strconv.FormatBool(x), nil
	case float64:
		if math.Abs(x) < 1e21 {
			return strconv.FormatFloat(x, 'f', -1, 64), nil
		}
		return strconv.FormatFloat(x, 'g', -1, 64), nil
	case json.Number:
		return x.String(), nil
	case map[string]any, []any:
		b, err := json.Marshal(x)
		if err != nil {
			return "", fmt.Errorf("format state value: %w", err)
		}
		return string(b), nil
	}
	return fmt.Sprint(v), nil
}
