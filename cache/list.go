package cache

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/adksession/adksession/cache/base"
)

// ListItem names one session of a listing.
type ListItem struct {
	User, SID string
	// Score is a user listing's session's place in the user's index: the
	// last update time (µs) the index holds for it.
	Score int64
}

// listCursor is the position after the last item of a page.
type listCursor struct {
	Kind   string  `json:"k"`           // "u": a user's listing, "a": an app's
	Score  float64 `json:"c,omitempty"` // user listing: update time of the last item
	Member string  `json:"m,omitempty"` // user listing: sid of the last item
	User   string  `json:"u,omitempty"` // app listing: the last item
	SID    string  `json:"i,omitempty"`
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
	switch {
	case err != nil:
	case c.Kind != kind:
		err = errors.New("token of another listing")
	case kind == "a" && (c.User == "" || c.SID == ""):
		err = errors.New("no last session")
	}
	if err != nil {
		return c, fmt.Errorf("%w: PageToken: %q is not a token this service issued for this listing", base.ErrInvalidArgument, tok)
	}
	return c, nil
}

// AppToken is the page token of an app listing whose previous page ended
// with last.
func AppToken(last ListItem) string {
	return encodeCursor(listCursor{Kind: "a", User: last.User, SID: last.SID})
}

// DecodeAppToken returns the last item of the page before tok (zero for
// "", the first page).
func DecodeAppToken(tok string) (ListItem, error) {
	if tok == "" {
		return ListItem{}, nil
	}
	c, err := decodeCursor(tok, "a")
	return ListItem{User: c.User, SID: c.SID}, err
}

// UserIndexState tells whether Redis holds the user's state hash and
// whether the user's session index is complete (it carries the
// IndexComplete member; an evicted or expired index does not).
func (s *Store) UserIndexState(ctx context.Context, app, user string) (userCached, complete bool, err error) {
	k := s.keys.Session(app, user, "")
	pipe := s.rdb.Pipeline()
	exists := pipe.Exists(ctx, k.User)
	marker := pipe.ZScore(ctx, k.UserIndex, IndexComplete)
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return false, false, fmt.Errorf("read user index: %w", err)
	}
	return exists.Val() == 1, marker.Err() == nil, nil
}

// UnflushedSessions returns the ids of the user's sessions in the app index
// of the user's shard: with a database, those whose create is not flushed yet.
func (s *Store) UnflushedSessions(ctx context.Context, app, user string) ([]string, error) {
	k := s.keys.Session(app, user, "")
	prefix := AppIndexMember(user, "")
	min, max := appIndexUserRange(user)
	ms, err := s.rdb.ZRangeByLex(ctx, k.AppIndex, &redis.ZRangeBy{Min: min, Max: max}).Result()
	if err != nil {
		return nil, fmt.Errorf("read app index: %w", err)
	}
	for i, m := range ms {
		ms[i] = strings.TrimPrefix(m, prefix)
	}
	return ms, nil
}

// IndexEntry is a session of a user's index: its id and, when the database
// has it (Stored), its last update µs there.
type IndexEntry struct {
	SID        string
	Stored     bool
	UpdateTime int64
}

// RebuildUserIndex completes a user's session index from entries (the
// sessions of the database and the user's unflushed creates) and marks it
// complete; see hydrate_index.lua. An index that did not exist or had a TTL
// gets ttl. guard is the user's read guard, read before the database:
// ErrReadOutdated when it moved.
func (s *Store) RebuildUserIndex(ctx context.Context, app, user string, entries []IndexEntry, ttl time.Duration, guard ReadGuard) error {
	k := s.keys.Session(app, user, "")
	keys := make([]string, 2, 2+len(entries))
	keys[0], keys[1] = k.UserIndex, guard.key
	args := make([]any, 3, 3+2*len(entries))
	args[0], args[1], args[2] = ttl.Milliseconds(), guard.field, guard.value
	for _, e := range entries {
		keys = append(keys, s.keys.Session(app, user, e.SID).Session)
		ut := ""
		if e.Stored {
			ut = strconv.FormatInt(e.UpdateTime, 10)
		}
		args = append(args, e.SID, ut)
	}
	n, err := s.run(ctx, hydrateIndexScript, keys, args...).Int64()
	_, err = guardedResult(n, err, "rebuild the session index of user "+user)
	return err
}

// ListUser lists a user's sessions, newest update first, limit at a time,
// starting after the position of token ("" = first page). It returns the
// token of the next page, "" after the last, and whether the index was
// complete at each of its reads: each read takes the completeness marker in
// the same transaction, so an index evicted after the caller checked it (a
// listing then empty or cut short) is told from a complete one.
func (s *Store) ListUser(ctx context.Context, app, user, token string, limit int) (items []ListItem, next string, complete bool, err error) {
	k := s.keys.Session(app, user, "")
	max, skipEqual := "+inf", ""
	var cur listCursor
	if token != "" {
		if cur, err = decodeCursor(token, "u"); err != nil {
			return nil, "", false, err
		}
		max, skipEqual = strconv.FormatFloat(cur.Score, 'f', -1, 64), cur.Member
	}
	complete = true
	// Each read is a transaction of its own, and the index may change
	// between them: a read goes on from the last member the previous one
	// returned, not from an offset (a session moved up out of the range
	// in between would shift the offsets, and the members after it be
	// skipped; found by the simulation, TestListUserWhileIndexChanges).
	// Members at the bound's score come again first, newest id first.
	var page []redis.Z
	var bound listCursor // the last member read, once again is set
	again, atBound := false, 0
	for len(page) < limit+1 {
		count := int64(limit + 1 - len(page) + atBound)
		tx := s.rdb.TxPipeline()
		marker := tx.ZScore(ctx, k.UserIndex, IndexComplete)
		rng := tx.ZRangeArgsWithScores(ctx, redis.ZRangeArgs{
			Key: k.UserIndex, Start: max, Stop: "-inf", ByScore: true, Rev: true, Count: count,
		})
		if _, err := tx.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
			return nil, "", false, fmt.Errorf("list user sessions: %w", err)
		}
		complete = complete && marker.Err() == nil
		zs := rng.Val()
		for _, z := range zs {
			// Skip the members the previous page returned, those an
			// earlier read of this page returned, and the completeness
			// marker.
			m := z.Member.(string)
			if m == IndexComplete || token != "" && z.Score == cur.Score && m >= skipEqual ||
				again && z.Score == bound.Score && m >= bound.Member {
				continue
			}
			page = append(page, z)
		}
		if int64(len(zs)) < count {
			break
		}
		// The next read starts at the last member's score: it returns the
		// members at that score this one did first again.
		last := zs[len(zs)-1]
		atBound = 0
		for _, z := range zs {
			if z.Score == last.Score {
				atBound++
			}
		}
		bound, again = listCursor{Score: last.Score, Member: last.Member.(string)}, true
		max = strconv.FormatFloat(last.Score, 'f', -1, 64)
	}
	if len(page) > limit {
		page = page[:limit]
		last := page[limit-1]
		next = encodeCursor(listCursor{Kind: "u", Score: last.Score, Member: last.Member.(string)})
	}
	items = make([]ListItem, len(page))
	for i, z := range page {
		items[i] = ListItem{User: user, SID: z.Member.(string), Score: int64(z.Score)}
	}
	return items, next, complete, nil
}

// IndexFix is a listed session whose place in its user's index is not the
// update time the listing shows for it.
type IndexFix struct {
	SID string
	// Was is its score as the page read it; To the update time listed.
	Was, To int64
	// Cached: To is the m:ut of Redis's copy of the session; else Redis
	// held none of it and To is the database's update time.
	Cached bool
}

// IndexPlace is where a session is in its user's index.
type IndexPlace struct {
	Score int64
	// Indexed: the session is in the index (else Score is 0).
	Indexed bool
}

// RepairUserIndex moves each fix's session to its To in the user's index
// if nothing changed since the listing read it: its score is still Was and
// Redis still holds the session hash with m:ut To (Cached), or still holds
// none of it. A session written, put back, deleted or repaired by another
// listing since is left as it is: its writer set its place. It returns
// each fix's session's place after the call, the one it set or the one it
// found.
func (s *Store) RepairUserIndex(ctx context.Context, app, user string, fixes []IndexFix) ([]IndexPlace, error) {
	places := make([]IndexPlace, len(fixes))
	for i, f := range fixes {
		k := s.keys.Session(app, user, f.SID)
		err := s.rdb.Watch(ctx, func(tx *redis.Tx) error {
			pipe := tx.Pipeline()
			score := pipe.ZScore(ctx, k.UserIndex, f.SID)
			ut := pipe.HGet(ctx, k.Session, "m:ut")
			exists := pipe.Exists(ctx, k.Session)
			if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
				return err
			}
			places[i] = IndexPlace{Score: int64(score.Val()), Indexed: score.Err() == nil}
			if score.Err() != nil || int64(score.Val()) != f.Was ||
				f.Cached && ut.Val() != strconv.FormatInt(f.To, 10) || !f.Cached && exists.Val() != 0 {
				return nil
			}
			_, err := tx.TxPipelined(ctx, func(p redis.Pipeliner) error {
				p.ZAddXX(ctx, k.UserIndex, redis.Z{Score: float64(f.To), Member: f.SID})
				return nil
			})
			if err == nil {
				places[i].Score = f.To
			}
			return err
		}, k.UserIndex, k.Session)
		if errors.Is(err, redis.TxFailedErr) {
			// Changed between the read and the move: read where it is now.
			score, zerr := s.rdb.ZScore(ctx, k.UserIndex, f.SID).Result()
			places[i] = IndexPlace{Score: int64(score), Indexed: zerr == nil}
			err = zerr
			if errors.Is(zerr, redis.Nil) {
				err = nil
			}
		}
		if err != nil {
			return nil, fmt.Errorf("repair the session index of user %s: %w", user, err)
		}
	}
	return places, nil
}

// UserCursorAfter tells whether the place (score, sid) in a user's index
// comes after the place (atScore, atSID) in a listing's order (newest
// first, then session ids in descending byte order): a page that ends at
// (atScore, atSID) leaves it to the next pages.
func UserCursorAfter(score int64, sid string, atScore int64, atSID string) bool {
	return score < atScore || score == atScore && sid < atSID
}

// AppIndexRange returns the first n sessions of app's index after the
// session after (zero: from the start), in (user, sid) byte order: a merge
// of the shards' indexes, read in pipelined rounds that fetch from each shard
// only as far as the merge may need.
func (s *Store) AppIndexRange(ctx context.Context, app string, after ListItem, n int) ([]ListItem, error) {
	shards := s.keys.Shards()
	from := make([]string, shards) // per shard: the bound of the next read
	last := make([]string, shards) // per shard: the last member read ("" none yet)
	done := make([]bool, shards)
	for i := range from {
		from[i] = "-"
		if after.User != "" {
			from[i] = appIndexAfter(after.User, after.SID)
		}
	}
	count := int64(2*n/shards + 2)
	var members []string
	for {
		pipe := s.rdb.Pipeline()
		cmds := make([]*redis.StringSliceCmd, shards)
		for i := range shards {
			if !done[i] && (last[i] == "" || len(members) < n || last[i] < members[n-1]) {
				cmds[i] = pipe.ZRangeArgs(ctx, redis.ZRangeArgs{
					Key: s.keys.AppIndex(i, app), Start: from[i], Stop: "+", ByLex: true, Count: count,
				})
			}
		}
		if pipe.Len() == 0 {
			break
		}
		if _, err := pipe.Exec(ctx); err != nil {
			return nil, fmt.Errorf("list app sessions: %w", err)
		}
		for i, c := range cmds {
			if c == nil {
				continue
			}
			ms := c.Val()
			members = append(members, ms...)
			if int64(len(ms)) < count {
				done[i] = true
			} else {
				last[i] = ms[len(ms)-1]
				from[i] = "(" + last[i]
			}
		}
		slices.Sort(members)
	}
	items := make([]ListItem, 0, min(n, len(members)))
	for _, m := range members[:min(n, len(members))] {
		user, sid, err := ParseAppIndexMember(m)
		if err != nil {
			return nil, err
		}
		items = append(items, ListItem{User: user, SID: sid})
	}
	return items, nil
}

// ListRead is what Redis holds of the sessions of a page (no events).
type ListRead struct {
	// Sessions[i] is the meta and session state of items[i] (User and App
	// unset), nil when Redis does not hold it.
	Sessions []*Snapshot
	// Deleted[i]: items[i] is deleted, its delete not flushed yet.
	Deleted []bool
	// Users holds the state of each user whose hash Redis holds.
	Users map[string]map[string]string
	// App is the app's state; AppCached whether Redis holds it.
	App       map[string]string
	AppCached bool
}

// ReadListed reads the session and user hashes of items and the app hash,
// in one pipeline.
func (s *Store) ReadListed(ctx context.Context, app string, items []ListItem) (*ListRead, error) {
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
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return nil, fmt.Errorf("read listed sessions: %w", err)
	}
	r := &ListRead{Sessions: make([]*Snapshot, len(items)), Deleted: make([]bool, len(items)),
		Users: map[string]map[string]string{}, AppCached: len(appCmd.Val()) > 0}
	var err error
	if r.App, _, err = stateHash(appCmd.Val()); err != nil {
		return nil, err
	}
	for user, c := range users {
		if len(c.Val()) > 0 {
			if r.Users[user], _, err = stateHash(c.Val()); err != nil {
				return nil, err
			}
		}
	}
	for i := range items {
		h := sess[i].Val()
		if r.Deleted[i] = h["m:del"] == "1"; len(h) == 0 || r.Deleted[i] {
			continue
		}
		flatH := make([]any, 0, 2*len(h))
		for f, v := range h {
			flatH = append(flatH, f, v)
		}
		snap := &Snapshot{}
		if err := snap.parse(flatH, map[string]string{}, []any{}, nil); err != nil {
			return nil, err
		}
		r.Sessions[i] = snap
	}
	return r, nil
}
