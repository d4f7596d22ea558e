package service

import (
	"context"
	"errors"
	"testing"
)

// TestNilRequests: every exported method that takes a request, handle or
// event refuses nil with ErrInvalidArgument, before it touches a store (the
// Service here has none: a call that got past the check would panic).
func TestNilRequests(t *testing.T) {
	ctx := context.Background()
	s := &Service{}
	calls := map[string]func() error{
		"Create": func() error { _, err := s.Create(ctx, nil); return err },
		"Get":    func() error { _, err := s.Get(ctx, nil); return err },
		"List":   func() error { _, err := s.List(ctx, nil); return err },
		"Delete": func() error { return s.Delete(ctx, nil) },
		"Rewind": func() error { _, err := s.Rewind(ctx, nil); return err },
		"Fork":   func() error { _, err := s.Fork(ctx, nil); return err },
		"Fork/ids": func() error {
			_, err := s.Fork(ctx, &ForkRequest{AppName: "a", UserID: "u", SessionID: "s", NewSessionID: "n\x00"})
			return err
		},
		"Inspect":       func() error { _, err := s.Inspect(ctx, nil); return err },
		"AppendTo":      func() error { return s.AppendTo(ctx, nil) },
		"AppendEvent":   func() error { return s.AppendEvent(ctx, nil, &Event{}) },
		"AppendEvent/e": func() error { return s.AppendEvent(ctx, &Session{}, nil) },
		"EndInvocation": func() error { return s.EndInvocation(ctx, nil, "i") },
		"ValidateEvent": func() error { return s.ValidateEvent(nil) },
		"InjectState":   func() error { _, err := InjectState(ctx, "{k}", nil); return err },
		"GetUserState":  func() error { _, err := s.GetUserState(ctx, nil); return err },
		"Prune":         func() error { _, err := s.Prune(ctx, nil); return err },
	}
	for name, call := range calls {
		t.Run(name, func(t *testing.T) {
			if err := call(); !errors.Is(err, ErrInvalidArgument) {
				t.Fatalf("got %v, want ErrInvalidArgument", err)
			}
		})
	}
}

// TestErrorIdentity: each error a caller can get has one identity, whichever
// layer detects it, and names the session once.
func TestErrorIdentity(t *testing.T) {
	err := sessionError(ErrStaleSession, "a", "u", "s")
	if got, want := err.Error(), "adksession: session handle is stale: session s of app a, user u"; got != want {
		t.Fatalf("message %q, want %q", got, want)
	}
	for _, e := range []error{ErrNotFound, ErrAlreadyExists, ErrStaleSession, ErrInvalidArgument, ErrRedisFull, ErrNotReplicated, ErrSchema} {
		if !errors.Is(sessionError(e, "a", "u", "s"), e) {
			t.Fatalf("%v: identity lost", e)
		}
	}
}
