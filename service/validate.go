package service

import (
	"fmt"
	"strings"
	"unicode/utf8"
)

// MaxIDBytes is the longest app name, user id or session id (ADK's column size).
const MaxIDBytes = 128

// MaxInvocationIDBytes is the longest invocation id (ADK's column size).
const MaxInvocationIDBytes = 255

// checkID validates one id; field names it in the error.
func checkID(field, v string, max int) error {
	switch {
	case v == "":
		return fmt.Errorf("%w: %s: empty", ErrInvalidArgument, field)
	case len(v) > max:
		return fmt.Errorf("%w: %s: %d bytes, limit %d", ErrInvalidArgument, field, len(v), max)
	}
	return checkText(field, v)
}

// checkText refuses a string Redis and the database would not hold alike:
// invalid UTF-8 (jsonb stores U+FFFD instead) or a NUL (Postgres refuses it).
func checkText(field, v string) error {
	switch {
	case !utf8.ValidString(v):
		return fmt.Errorf("%w: %s: not valid UTF-8", ErrInvalidArgument, field)
	case strings.IndexByte(v, 0) >= 0:
		return fmt.Errorf("%w: %s: contains NUL", ErrInvalidArgument, field)
	}
	return nil
}

// checkSession validates the identity of a session.
func checkSession(app, user, sid string) error {
	if err := checkID("AppName", app, MaxIDBytes); err != nil {
		return err
	}
	if err := checkID("UserID", user, MaxIDBytes); err != nil {
		return err
	}
	return checkID("SessionID", sid, MaxIDBytes)
}
