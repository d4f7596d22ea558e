package bench

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	_ "github.com/lib/pq" // the raw reads of the cold-Get reference

	"github.com/redis/go-redis/v9"

	"github.com/adksession/adksession/cache"
	"github.com/adksession/adksession/cmd/adksession/internal/loadgen"
	"github.com/adksession/adksession/service"
)

// readRatios are the read paths against their references, each pair timed
// alternately on the same sessions in the same run (docs/benchmarks.md).
type readRatios struct {
	events          int           // events of each session read
	full, fetch     time.Duration // p50: full Get; ZRANGE of its events + json.Valid of each
	cold, rows      time.Duration // p50: cold Get; the raw rows of ADK's get_session
	fullErr, colErr error
}

// readSamples is how many sessions each pair reads.
const readSamples = 20

// measureReads times a full Get of sessions against their raw fetch, and
// with a Postgres database a cold Get (the session's keys deleted first)
// against reading its rows raw.
func measureReads(ctx context.Context, svc *service.Service, rdb redis.UniversalClient, keys cache.Keys, refs []loadgen.Ref, databaseURL string) readRatios {
	var r readRatios
	refs = refs[:min(len(refs), readSamples)]
	var full, fetch []time.Duration
	for _, ref := range refs {
		start := time.Now()
		got, err := svc.Get(ctx, &service.GetRequest{AppName: ref.App, UserID: ref.User, SessionID: ref.ID})
		if err != nil {
			r.fullErr = err
			return r
		}
		full = append(full, time.Since(start))
		r.events = got.Session.Events().Len()
		start = time.Now()
		if err := rawFetch(ctx, rdb, keys.Session(ref.App, ref.User, ref.ID).Events); err != nil {
			r.fullErr = err
			return r
		}
		fetch = append(fetch, time.Since(start))
	}
	r.full, r.fetch = median(full), median(fetch)
	if !strings.HasPrefix(databaseURL, "postgres") {
		r.colErr = errors.New("no Postgres database")
		return r
	}
	db, err := sql.Open("postgres", databaseURL)
	if err != nil {
		r.colErr = err
		return r
	}
	defer db.Close()
	var cold, rows []time.Duration
	for _, ref := range refs {
		k := keys.Session(ref.App, ref.User, ref.ID)
		if err := rdb.Del(ctx, k.Session, k.Events, k.EventIDs, k.Undo).Err(); err != nil {
			r.colErr = err
			return r
		}
		start := time.Now()
		if _, err := svc.Get(ctx, &service.GetRequest{AppName: ref.App, UserID: ref.User, SessionID: ref.ID}); err != nil {
			r.colErr = err
			return r
		}
		cold = append(cold, time.Since(start))
		start = time.Now()
		if err := rawRows(ctx, db, ref); err != nil {
			r.colErr = err
			return r
		}
		rows = append(rows, time.Since(start))
	}
	r.cold, r.rows = median(cold), median(rows)
	return r
}

// rawFetch reads an events zset whole and checks each member as JSON.
func rawFetch(ctx context.Context, rdb redis.UniversalClient, key string) error {
	members, err := rdb.ZRange(ctx, key, 0, -1).Result()
	if err != nil {
		return err
	}
	for _, m := range members {
		if !json.Valid([]byte(m[strings.IndexByte(m, ':')+1:])) {
			return fmt.Errorf("%s: a member is not JSON", key)
		}
	}
	return nil
}

// rawRows reads a session's rows as ADK's get_session does (its row, its
// events in order, its app and user state), each column into bytes.
func rawRows(ctx context.Context, db *sql.DB, ref loadgen.Ref) error {
	var state, appState, userState []byte
	var update time.Time
	if err := db.QueryRowContext(ctx, `SELECT state, update_time FROM sessions WHERE app_name = $1 AND user_id = $2 AND id = $3`,
		ref.App, ref.User, ref.ID).Scan(&state, &update); err != nil {
		return err
	}
	rows, err := db.QueryContext(ctx, `SELECT id, invocation_id, "timestamp", event_data FROM events
WHERE app_name = $1 AND user_id = $2 AND session_id = $3 ORDER BY "timestamp"`, ref.App, ref.User, ref.ID)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		var id, inv string
		var ts time.Time
		var data []byte
		if err := rows.Scan(&id, &inv, &ts, &data); err != nil {
			return err
		}
	}
	if err := rows.Err(); err != nil {
		return err
	}
	if err := db.QueryRowContext(ctx, `SELECT state FROM app_states WHERE app_name = $1`, ref.App).Scan(&appState); err != nil {
		return err
	}
	return db.QueryRowContext(ctx, `SELECT state FROM user_states WHERE app_name = $1 AND user_id = $2`, ref.App, ref.User).Scan(&userState)
}

func median(d []time.Duration) time.Duration {
	if len(d) == 0 {
		return 0
	}
	d = slices.Clone(d)
	slices.Sort(d)
	return d[len(d)/2]
}

func (r readRatios) write(w io.Writer) {
	if r.fullErr != nil {
		fmt.Fprintf(w, "get vs fetch  n/a (%v)\n", r.fullErr)
	} else {
		fmt.Fprintf(w, "get vs fetch  full Get of %d events p50 %s, ZRANGE + json.Valid %s: ×%.2f\n",
			r.events, ms(r.full), ms(r.fetch), float64(r.full)/float64(r.fetch))
	}
	if r.colErr != nil {
		fmt.Fprintf(w, "cold vs rows  n/a (%v)\n", r.colErr)
	} else {
		fmt.Fprintf(w, "cold vs rows  cold Get p50 %s, the same rows from Postgres raw %s: ×%.2f\n",
			ms(r.cold), ms(r.rows), float64(r.cold)/float64(r.rows))
	}
}
