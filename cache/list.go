package cache

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"
)

// ListItem is one session of a listing. Snap (meta and state, no events) is
// nil when the session is indexed but its hash is no longer cached.
type ListItem struct {
	User, SID string
	Snap      *Snapshot
}

// listCursor is the position after the last item of a page.
type listCursor struct {
	Kind   string  `json:"k"`           // "u": a user's listing, "a": an app's
	Score  float64 `json:"c,omitempty"` // user listing: update time of the last item
	Member string  `json:"m"`           // user listing: sid; app listing: index member
	Shard  int     `json:"s,omitempty"` // app listing: shard of the last item
}

func encodeCursor(c listCursor) string {
	b, _ := json.Marshal(c)
	return base64.RawURLEncoding.EncodeToString(b)
}

func decodeCursor(tok, kind string) (listCursor, error) {
	var c listCursor
	b, err := base64.RawURLEncoding.DecodeString(tok)
	if err == nil {
		err = json.Unmarshal(b, &c)
	}
	if err == nil && c.Kind != kind {
		err = errors.New("token of another listing")
	}
	if err != nil {
		return c, fmt.Errorf("%w: %q is not a token this service issued for this listing", ErrBadToken, tok)
	}
	return c, nil
}

// ErrBadToken: a page token this service did not issue.
var ErrBadToken = errors.New("adksession: bad page token")

// Tombstoned tells whether a session is deleted in Redis but its delete is
// not yet in the database.
func (s *Store) Tombstoned(ctx context.Context, app, user, sid string) (bool, error) {
	v, err := s.rdb.HGet(ctx, s.keys.Session(app, user, sid).Session, "m:del").Result()
	if errors.Is(err, redis.Nil) {
		return false, nil
	}
	return v == "1", err
}

// UserIndexHas tells whether Redis holds the user's state hash (then the
// user's session index is complete) and whether sid is in that index.
func (s *Store) UserIndexHas(ctx context.Context, app, user, sid string) (cached, indexed bool, err error) {
	k := s.keys.Session(app, user, sid)
	pipe := s.rdb.Pipeline()
	exists := pipe.Exists(ctx, k.User)
	score := pipe.ZScore(ctx, k.UserIndex, sid)
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return false, false, fmt.Errorf("read user index: %w", err)
	}
	return exists.Val() == 1, score.Err() == nil, nil
}

// AppIndexComplete tells whether the app's session index lists every
// session the database has (it does unless Redis lost it: see
// MarkAppIndexComplete).
func (s *Store) AppIndexComplete(ctx context.Context, app string) (bool, error) {
	v, err := s.rdb.HGet(ctx, s.keys.App(app).State, "m:idx").Result()
	if errors.Is(err, redis.Nil) {
		return false, nil
	}
	return v == "1", err
}

// AddToAppIndex adds sessions read from the database to the app index.
func (s *Store) AddToAppIndex(ctx context.Context, app string, sessions [][2]string) error {
	pipe := s.rdb.Pipeline()
	for _, us := range sessions {
		k := s.keys.Session(app, us[0], us[1])
		pipe.ZAdd(ctx, k.AppIndex, redis.Z{Score: 0, Member: AppIndexMember(us[0], us[1])})
	}
	_, err := pipe.Exec(ctx)
	return err
}

// MarkAppIndexComplete records that the app index is complete.
func (s *Store) MarkAppIndexComplete(ctx context.Context, app string) error {
	return s.rdb.HSet(ctx, s.keys.App(app).State, "m:idx", "1").Err()
}

// ListUser lists a user's sessions, newest update first, limit at a time,
// starting after the position of token ("" = first page). It returns the
// token of the next page, "" after the last.
func (s *Store) ListUser(ctx context.Context, app, user, token string, limit int) ([]ListItem, string, error) {
	k := s.keys.Session(app, user, "")
	max, skipEqual := "+inf", ""
	var cur listCursor
	if token != "" {
		var err error
		if cur, err = decodeCursor(token, "u"); err != nil {
			return nil, "", err
		}
		max, skipEqual = strconv.FormatFloat(cur.Score, 'f', -1, 64), cur.Member
	}
	var page []redis.Z
	for offset := int64(0); len(page) < limit+1; {
		zs, err := s.rdb.ZRangeArgsWithScores(ctx, redis.ZRangeArgs{
			Key: k.UserIndex, Start: max, Stop: "-inf", ByScore: true, Rev: true, Offset: offset, Count: int64(limit + 1),
		}).Result()
		if err != nil {
			return nil, "", fmt.Errorf("list user sessions: %w", err)
		}
		for _, z := range zs {
			// Members of equal score come in descending order; skip those
			// the previous page returned.
			if token != "" && z.Score == cur.Score && z.Member.(string) >= skipEqual {
				continue
			}
			page = append(page, z)
		}
		if len(zs) < limit+1 {
			break
		}
		offset += int64(len(zs))
	}
	next := ""
	if len(page) > limit {
		page = page[:limit]
		last := page[limit-1]
		next = encodeCursor(listCursor{Kind: "u", Score: last.Score, Member: last.Member.(string)})
	}
	items := make([]ListItem, len(page))
	for i, z := range page {
		items[i] = ListItem{User: user, SID: z.Member.(string)}
	}
	if err := s.fillSnapshots(ctx, app, items); err != nil {
		return nil, "", err
	}
	return items, next, nil
}

// ListApp lists the sessions of every user of app, shard by shard, in a
// stable order that appends never change (creates and deletes only).
func (s *Store) ListApp(ctx context.Context, app, token string, limit int) ([]ListItem, string, error) {
	var cur listCursor
	if token != "" {
		var err error
		if cur, err = decodeCursor(token, "a"); err != nil {
			return nil, "", err
		}
		if cur.Shard < 0 || cur.Shard >= s.keys.Shards() {
			return nil, "", fmt.Errorf("%w: %q names shard %d of %d", ErrBadToken, token, cur.Shard, s.keys.Shards())
		}
	}
	var items []ListItem
	var members []string
	var shards []int
	for shard := cur.Shard; shard < s.keys.Shards() && len(members) < limit+1; shard++ {
		min := "-"
		if shard == cur.Shard && cur.Member != "" {
			min = "(" + cur.Member
		}
		k := s.keys.tag(shard) + "as:" + Escape(app)
		ms, err := s.rdb.ZRangeArgs(ctx, redis.ZRangeArgs{
			Key: k, Start: min, Stop: "+", ByLex: true, Count: int64(limit + 1 - len(members)),
		}).Result()
		if err != nil {
			return nil, "", fmt.Errorf("list app sessions: %w", err)
		}
		for _, m := range ms {
			members = append(members, m)
			shards = append(shards, shard)
		}
	}
	next := ""
	if len(members) > limit {
		members, shards = members[:limit], shards[:limit]
		next = encodeCursor(listCursor{Kind: "a", Shard: shards[limit-1], Member: members[limit-1]})
	}
	for _, m := range members {
		eu, es, ok := strings.Cut(m, ":")
		if !ok {
			return nil, "", fmt.Errorf("app index member %q: malformed", m)
		}
		user, err := Unescape(eu)
		if err != nil {
			return nil, "", err
		}
		sid, err := Unescape(es)
		if err != nil {
			return nil, "", err
		}
		items = append(items, ListItem{User: user, SID: sid})
	}
	if err := s.fillSnapshots(ctx, app, items); err != nil {
		return nil, "", err
	}
	return items, next, nil
}

// fillSnapshots reads the session and user hashes of items (one pipeline)
// and the app hash, and sets each item's Snap (nil when not cached).
func (s *Store) fillSnapshots(ctx context.Context, app string, items []ListItem) error {
	if len(items) == 0 {
		return nil
	}
	pipe := s.rdb.Pipeline()
	sess := make([]*redis.MapStringStringCmd, len(items))
	users := map[string]*redis.MapStringStringCmd{}
	for i, it := range items {
		k := s.keys.Session(app, it.User, it.SID)
		sess[i] = pipe.HGetAll(ctx, k.Session)
		if users[it.User] == nil {
			users[it.User] = pipe.HGetAll(ctx, k.User)
		}
	}
	appCmd := pipe.HGetAll(ctx, s.keys.App(app).State)
	if _, err := pipe.Exec(ctx); err != nil && err != redis.Nil {
		return fmt.Errorf("read listed sessions: %w", err)
	}
	appState, _, err := stateHash(appCmd.Val())
	if err != nil {
		return err
	}
	for i := range items {
		h := sess[i].Val()
		if len(h) == 0 || h["m:del"] == "1" {
			continue
		}
		flatH := make([]any, 0, 2*len(h))
		for f, v := range h {
			flatH = append(flatH, f, v)
		}
		snap := &Snapshot{}
		if err := snap.parse(flatH, users[items[i].User].Val(), []any{}, nil); err != nil {
			return err
		}
		snap.App = appState
		items[i].Snap = snap
	}
	return nil
}
