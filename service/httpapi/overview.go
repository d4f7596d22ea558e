package httpapi

import (
	"bufio"
	"context"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/adksession/adksession/service"
)

// overviewJSON is what the dashboard polls (GET /api/overview).
type overviewJSON struct {
	Time             float64      `json:"time"`
	AppendsPerSecond float64      `json:"appendsPerSecond"`
	CachedSessions   *int64       `json:"cachedSessions"`
	Redis            redisJSON    `json:"redis"`
	Flush            *flushJSON   `json:"flush"`
	Recent           []recentJSON `json:"recent"`
}

type redisJSON struct {
	UsedMemory      int64  `json:"usedMemory"`
	UsedMemoryHuman string `json:"usedMemoryHuman"`
	MaxMemory       int64  `json:"maxMemory"`
	Error           string `json:"error,omitempty"`
}

type flushJSON struct {
	LagSeconds  float64 `json:"lagSeconds"`
	Backlog     int64   `json:"backlog"`
	DeadLetters int64   `json:"deadLetters"`
	Error       string  `json:"error,omitempty"`
}

// cachedCount remembers the last count of cached sessions: counting scans
// the keyspace, so the dashboard's polls share one count per interval.
type cachedCount struct {
	mu    sync.Mutex
	at    time.Time
	n     int64
	valid bool
}

const cachedCountEvery = 10 * time.Second

func (h *Handler) cachedSessions(ctx context.Context) *int64 {
	c := &h.count
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.valid || time.Since(c.at) > cachedCountEvery {
		n, err := h.opt.CachedSessions(ctx)
		if err != nil {
			h.log.Warn("adksession dashboard: count cached sessions", "err", err)
			return nil
		}
		c.n, c.at, c.valid = n, time.Now(), true
	}
	n := c.n
	return &n
}

// overview: GET /api/overview, the dashboard's live numbers.
func (h *Handler) overview(w http.ResponseWriter, r *http.Request) error {
	ctx, cancel := context.WithTimeout(r.Context(), 3*time.Second)
	defer cancel()
	now := time.Now()
	out := overviewJSON{
		Time:             float64(now.UnixMicro()) / 1e6,
		AppendsPerSecond: h.metrics.appendRate.perSecond(now),
		CachedSessions:   h.cachedSessions(ctx),
		Recent:           h.recent.list(),
	}
	out.Redis = h.redisMemory(ctx)
	if h.opt.FlushStats != nil {
		f := &flushJSON{}
		if s, err := h.opt.FlushStats(ctx); err != nil {
			h.log.Warn("adksession dashboard: flush stats", "err", err)
			f.Error = "flush stats unavailable (see the server log)"
		} else {
			f.LagSeconds, f.Backlog, f.DeadLetters = s.Lag.Seconds(), s.Backlog, s.DeadLetters
		}
		out.Flush = f
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

// redisMemory reads INFO memory for the overview, logging a failure.
func (h *Handler) redisMemory(ctx context.Context) redisJSON {
	out, err := h.readRedisMemory(ctx)
	if err != nil {
		h.metrics.errors.WithLabelValues("overview", "redis").Inc()
		h.log.Warn("adksession dashboard: redis INFO memory", "err", err)
		return redisJSON{Error: "redis unavailable (see the server log)"}
	}
	return out
}

// readRedisMemory reads INFO memory.
func (h *Handler) readRedisMemory(ctx context.Context) (redisJSON, error) {
	info, err := h.opt.Redis.Info(ctx, "memory").Result()
	if err != nil {
		return redisJSON{}, err
	}
	var out redisJSON
	sc := bufio.NewScanner(strings.NewReader(info))
	for sc.Scan() {
		k, v, ok := strings.Cut(strings.TrimSpace(sc.Text()), ":")
		if !ok {
			continue
		}
		switch k {
		case "used_memory":
			out.UsedMemory, _ = strconv.ParseInt(v, 10, 64)
		case "used_memory_human":
			out.UsedMemoryHuman = v
		case "maxmemory":
			out.MaxMemory, _ = strconv.ParseInt(v, 10, 64)
		}
	}
	if out.UsedMemoryHuman == "" {
		out.Error = "INFO memory not reported by this server"
	}
	return out, nil
}

// search: GET /api/sessions?app=&user=&pageToken= lists sessions of an
// app (and user) for the dashboard: {"sessions": [...], "nextPageToken"}.
func (h *Handler) search(w http.ResponseWriter, r *http.Request) error {
	q := r.URL.Query()
	if q.Get("app") == "" {
		return badRequest("app: required")
	}
	size, err := queryInt(r, "pageSize")
	if err != nil {
		return err
	}
	if size == 0 {
		size = 50
	}
	resp, err := h.svc.List(r.Context(), &service.ListRequest{AppName: q.Get("app"), UserID: q.Get("user"), PageSize: size, PageToken: q.Get("pageToken")})
	if err != nil {
		return err
	}
	out := struct {
		Sessions      []recentJSON `json:"sessions"`
		NextPageToken string       `json:"nextPageToken"`
	}{Sessions: make([]recentJSON, len(resp.Sessions)), NextPageToken: resp.NextPageToken}
	for i, s := range resp.Sessions {
		out.Sessions[i] = recentJSON{AppName: s.AppName(), UserID: s.UserID(), ID: s.ID(), LastUpdateTime: epochSeconds(s.LastUpdateTime())}
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

// inspect: GET /api/session?app=&user=&id= answers one session for the
// dashboard: {"session": ..., "rewound": [ids of the events rewinds hide
// (service.VisibleEvents)]}.
func (h *Handler) inspect(w http.ResponseWriter, r *http.Request) error {
	q := r.URL.Query()
	resp, err := h.svc.Get(r.Context(), &service.GetRequest{AppName: q.Get("app"), UserID: q.Get("user"), SessionID: q.Get("id")})
	if err != nil {
		return err
	}
	out := struct {
		Session *sessionJSON `json:"session"`
		Rewound []string     `json:"rewound"`
	}{Session: toJSON(resp.Session), Rewound: []string{}}
	visible := map[string]bool{}
	for _, ev := range service.VisibleEvents(out.Session.Events) {
		visible[ev.ID] = true
	}
	for _, ev := range out.Session.Events {
		if !visible[ev.ID] {
			out.Rewound = append(out.Rewound, ev.ID)
		}
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}
