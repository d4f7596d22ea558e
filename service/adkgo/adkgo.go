// Package adkgo adapts an adksession *service.Service to adk-go's
// session.Service (google.golang.org/adk/v2/session), so that adk-go
// runners keep their sessions in adksession with no code of their own:
//
//	svc, err := service.Open(ctx, service.Config{RedisURL: "redis://127.0.0.1:6379/0"})
//	...
//	r, err := runner.New(runner.Config{AppName: "app", Agent: a, SessionService: adkgo.New(svc)})
//
// It is the only package of adksession that imports adk-go. Events convert
// field by field (see docs/adkgo.md): every field of adk-go v2's
// session.Event is stored, those service.Event does not name under their
// adk-go JSON key in service.Event.Extra.
package adkgo

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"google.golang.org/adk/v2/session"

	"github.com/adksession/adksession/service"
)

// listPageSize is the page size List reads service.List with.
const listPageSize = 500

// New returns an adk-go session.Service over svc. It is safe for
// concurrent use, like svc; it does not own svc (close svc yourself).
//
// Errors wrap adksession's sentinels (service.ErrNotFound,
// service.ErrAlreadyExists, service.ErrStaleSession, ...), so errors.Is
// works on them.
func New(svc *service.Service) session.Service {
	return NewWithConfig(svc, Config{})
}

// Config adjusts the adapter; the zero Config is New's.
type Config struct {
	// CompactedGets makes a Get with neither NumRecentEvents nor After (the
	// runner's) return the compacted view of the session's events,
	// service.GetRequest.Compacted, rather than the whole history. A Get
	// with either is the window it asks for, as without it. The state is the
	// full state and appends through the handle go on top of the whole
	// stored history, as with any read. Give such an adapter only to runners
	// that do not compact, and read the view only of sessions adk-go can
	// read it of (docs/adkgo.md, "The compacted view").
	CompactedGets bool
}

// NewWithConfig is New with cfg.
func NewWithConfig(svc *service.Service, cfg Config) session.Service {
	return &sessionService{svc: svc, pageSize: listPageSize, compacted: cfg.CompactedGets}
}

type sessionService struct {
	svc       *service.Service
	pageSize  int
	compacted bool // Config.CompactedGets
}

var _ session.Service = (*sessionService)(nil)

// Create creates a session; an empty SessionID gets a UUIDv4. The
// returned session carries the app and user state other sessions wrote.
func (s *sessionService) Create(ctx context.Context, req *session.CreateRequest) (*session.CreateResponse, error) {
	if req == nil {
		return nil, fmt.Errorf("%w: create request: nil", service.ErrInvalidArgument)
	}
	resp, err := s.svc.Create(ctx, &service.CreateRequest{
		AppName: req.AppName, UserID: req.UserID, SessionID: req.SessionID, State: req.State,
	})
	if err != nil {
		return nil, err
	}
	h, err := newHandle(resp.Session)
	if err != nil {
		return nil, err
	}
	return &session.CreateResponse{Session: h}, nil
}

// Get returns a session with the events NumRecentEvents and After select
// (After inclusive; zero values do not filter), or with Config.CompactedGets
// and neither, the compacted view of its events; and its full state.
func (s *sessionService) Get(ctx context.Context, req *session.GetRequest) (*session.GetResponse, error) {
	if req == nil {
		return nil, fmt.Errorf("%w: get request: nil", service.ErrInvalidArgument)
	}
	resp, err := s.svc.Get(ctx, &service.GetRequest{
		AppName: req.AppName, UserID: req.UserID, SessionID: req.SessionID,
		NumRecentEvents: req.NumRecentEvents, After: req.After,
		Compacted: s.compacted && req.NumRecentEvents == 0 && req.After.IsZero(),
	})
	if err != nil {
		return nil, err
	}
	h, err := newHandle(resp.Session)
	if err != nil {
		return nil, err
	}
	return &session.GetResponse{Session: h}, nil
}

// List returns every session of (AppName, UserID), or of the whole app
// when UserID is empty, with their state and no events. It reads all pages
// of service.List; use service.List directly to page.
func (s *sessionService) List(ctx context.Context, req *session.ListRequest) (*session.ListResponse, error) {
	if req == nil {
		return nil, fmt.Errorf("%w: list request: nil", service.ErrInvalidArgument)
	}
	out := &session.ListResponse{Sessions: []session.Session{}}
	token := ""
	for {
		page, err := s.svc.List(ctx, &service.ListRequest{
			AppName: req.AppName, UserID: req.UserID, PageSize: s.pageSize, PageToken: token,
		})
		if err != nil {
			return nil, err
		}
		for _, sess := range page.Sessions {
			h, err := newHandle(sess)
			if err != nil {
				return nil, err
			}
			out.Sessions = append(out.Sessions, h)
		}
		if page.NextPageToken == "" {
			return out, nil
		}
		token = page.NextPageToken
	}
}

// Delete removes a session and its events; app and user state stay.
// Deleting a missing session, or one of another user, is not an error and
// removes nothing else.
func (s *sessionService) Delete(ctx context.Context, req *session.DeleteRequest) error {
	if req == nil {
		return fmt.Errorf("%w: delete request: nil", service.ErrInvalidArgument)
	}
	return s.svc.Delete(ctx, &service.DeleteRequest{AppName: req.AppName, UserID: req.UserID, SessionID: req.SessionID})
}

// AppendEvent stores ev (unless it is Partial) and applies its state delta
// atomically, then updates sess in place: its state (temp: keys included,
// for the rest of the invocation) and its events (ev without temp: keys).
// The ID and timestamp the store assigned (a new UUID when ev.ID is empty,
// now when ev.Timestamp is zero, the timestamp truncated to microseconds
// and moved after the previous event's if needed) are written back into
// ev; ev's StateDelta is left as it was, as adk-go's own services do.
//
// sess is normally a session this service returned. Any other
// session.Session (say, from adk-go's in-memory service) is accepted when
// the session exists in adksession: the event is appended to that stored
// session and ev's delta is applied to sess through sess.State().Set.
//
// A handle older than the stored session (another handle appended since)
// is service.ErrStaleSession with nothing written, unless the service was
// opened with Config.ConcurrentAppends.
func (s *sessionService) AppendEvent(ctx context.Context, sess session.Session, ev *session.Event) error {
	if sess == nil {
		return fmt.Errorf("%w: session: nil", service.ErrInvalidArgument)
	}
	if ev == nil {
		return fmt.Errorf("%w: event: nil", service.ErrInvalidArgument)
	}
	if ev.Partial {
		return nil
	}
	stored, err := toService(ev)
	if err != nil {
		return err
	}
	h, ours := sess.(*handle)
	if !ours {
		return s.appendForeign(ctx, sess, ev, stored)
	}
	h.appendMu.Lock()
	defer h.appendMu.Unlock()
	if err := s.svc.AppendEvent(ctx, h.inner, stored); err != nil {
		return err
	}
	ev.ID, ev.Timestamp = stored.ID, stored.Timestamp
	return h.appended(ev)
}

// appendForeign appends through a fresh handle on the stored session that
// sess names, then applies ev's delta to sess.
func (s *sessionService) appendForeign(ctx context.Context, sess session.Session, ev *session.Event, stored *service.Event) error {
	resp, err := s.svc.Get(ctx, &service.GetRequest{
		AppName: sess.AppName(), UserID: sess.UserID(), SessionID: sess.ID(), NumRecentEvents: 1,
	})
	if err != nil {
		return fmt.Errorf("append event to session %s of app %s, user %s (a %T): %w", sess.ID(), sess.AppName(), sess.UserID(), sess, err)
	}
	if err := s.svc.AppendEvent(ctx, resp.Session, stored); err != nil {
		return err
	}
	ev.ID, ev.Timestamp = stored.ID, stored.Timestamp
	st := sess.State()
	if st == nil {
		return nil
	}
	var errs []error
	for k, v := range ev.Actions.StateDelta {
		if err := st.Set(k, v); err != nil {
			errs = append(errs, fmt.Errorf("state key %q: %w", k, err))
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("event %s was appended to session %s of app %s, user %s, but its %T handle did not take the state: %w", ev.ID, sess.ID(), sess.AppName(), sess.UserID(), sess, errors.Join(errs...))
	}
	return nil
}

// hasTemp reports whether key is invocation-scoped.
func hasTemp(key string) bool { return strings.HasPrefix(key, session.KeyPrefixTemp) }
