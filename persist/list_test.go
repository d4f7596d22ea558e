package persist

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"net/url"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/adksession/adksession/cache/base"
	"github.com/adksession/adksession/integration/testenv"
)

// listAll pages through ListSessions, size at a time.
func listAll(t *testing.T, s *Store, app string, size int) []base.SessionRef {
	t.Helper()
	var all []base.SessionRef
	var after base.SessionRef
	for {
		page, err := s.ListSessions(context.Background(), app, after, size)
		must(t, err)
		if len(page.Sessions) > size {
			t.Fatalf("page of %d", len(page.Sessions))
		}
		for _, p := range page.Sessions {
			all = append(all, p.Key)
		}
		if len(page.Sessions) < size {
			return all
		}
		after = page.Sessions[len(page.Sessions)-1].Key
	}
}

// lk is a session key of app "app".
func lk(user, id string) base.SessionRef { return base.SessionRef{App: "app", User: user, ID: id} }

// listFixture writes sessions for the listing tests: of app "app", u1/s1,
// u1/s3 (rev 2), u2/s1 (rev 4), u3/adk (written by ADK, 2 events) and
// u1/s2 (deleted); u1 has a user state; another app has a session.
func listFixture(t *testing.T, s *Store) {
	apply(t, s, &Batch{Sessions: []SessionUpsert{
		upsert(lk("u1", "s3"), inc1, 0, 2), upsert(lk("u1", "s1"), inc1, 0, 0), upsert(lk("u1", "s2"), inc1, 0, 1),
		upsert(lk("u2", "s1"), inc2, 0, 4), upsert(base.SessionRef{App: "other", User: "u1", ID: "s9"}, inc1, 0, 0),
	}, UserStates: []StateUpsert{{AppName: "app", UserID: "u1", Rev: 1, State: state(1), UpdateTime: time.UnixMicro(inc1)}}})
	apply(t, s, &Batch{Deletes: []SessionDelete{{lk("u1", "s2"), inc1, 0}}})
	insertADKSession(t, s, lk("u3", "adk"), 2)
}

func TestListSessions(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		s := migrated(t, b)
		listFixture(t, s)
		want := []base.SessionRef{lk("u1", "s1"), lk("u1", "s3"), lk("u2", "s1"), lk("u3", "adk")}
		for _, size := range []int{1, 2, 3, 10} {
			same(t, "app-wide list", listAll(t, s, "app", size), want)
		}

		page, err := s.ListSessions(context.Background(), "app", lk("u1", "s1"), 10)
		must(t, err)
		got := page.Sessions[0]
		same(t, "summary", []any{got.Key, got.Incarnation, got.Rev, string(got.State["count"]), got.CreateTime, got.UpdateTime},
			[]any{lk("u1", "s3"), inc1, int64(2), "2", time.UnixMicro(inc1).UTC(), eventTime(inc1, 2)})
		same(t, "ADK session", []any{page.Sessions[2].Incarnation, page.Sessions[2].Rev}, []any{adkCreateTime.UnixMicro(), int64(2)})
		same(t, "user states", page.Users, map[string]map[string]json.RawMessage{
			"u1": state(1), "u2": {}, "u3": {"x": json.RawMessage("2")},
		})
	})
}

// byteOrderIDs sort differently in byte order and in a natural language's
// collation.
var byteOrderIDs = []string{"a", "B", "b", "A", "é", "e", "a b", "a-b", "ab", "Z", "_", "~x"}

// TestListSessionsByteOrder: the listing is in byte order whatever the
// database's collation (here an ICU English one on Postgres), because
// listings merge it with Redis's app index.
func TestListSessionsByteOrder(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		newURL := b.newURL
		if b.name == "postgres" {
			newURL = icuPostgresURL
		}
		s, _ := migratedAt(t, backend{name: b.name, newURL: newURL})
		var ups []SessionUpsert
		var want []base.SessionRef
		for _, u := range byteOrderIDs {
			for _, id := range byteOrderIDs {
				k := base.SessionRef{App: "app", User: u, ID: id}
				ups = append(ups, upsert(k, inc1, 0, 0))
				want = append(want, k)
			}
		}
		apply(t, s, &Batch{Sessions: ups})
		slices.SortFunc(want, func(a, b base.SessionRef) int {
			if c := strings.Compare(a.User, b.User); c != 0 {
				return c
			}
			return strings.Compare(a.ID, b.ID)
		})
		same(t, "byte order", keyList(listAll(t, s, "app", 7)), keyList(want))
		times, err := s.SessionTimes(context.Background(), "app", "B")
		must(t, err)
		same(t, "sessions of user B", len(times), len(byteOrderIDs))
	})
}

// keyList renders keys compactly, for readable failures.
func keyList(keys []base.SessionRef) string {
	var b strings.Builder
	for _, k := range keys {
		fmt.Fprintf(&b, "%q/%q ", k.User, k.ID)
	}
	return b.String()
}

// icuPostgresURL is postgresURL for a database whose default collation is
// ICU's English one (a, A, b, B, ...), not byte order.
func icuPostgresURL(t testing.TB) string {
	u := testenv.FreshDatabase(t)
	pu, err := url.Parse(u)
	must(t, err)
	name := strings.TrimPrefix(pu.Path, "/")
	admin, err := sql.Open("postgres", os.Getenv("ADKSESSION_TEST_DATABASE_URL"))
	must(t, err)
	defer admin.Close()
	_, err = admin.Exec("DROP DATABASE " + name)
	must(t, err)
	_, err = admin.Exec("CREATE DATABASE " + name + " TEMPLATE template0 ENCODING 'UTF8' LOCALE_PROVIDER icu ICU_LOCALE 'en' LOCALE 'C'")
	must(t, err)
	var natural string
	db, err := sql.Open("postgres", u)
	must(t, err)
	defer db.Close()
	must(t, db.QueryRow(`SELECT string_agg(x, '' ORDER BY x) FROM (VALUES ('a'), ('B')) AS v(x)`).Scan(&natural))
	same(t, "the database's own order", natural, "aB")
	return u
}

func TestReadSessions(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		s := migrated(t, b)
		ctx := context.Background()
		listFixture(t, s)
		got, err := s.ReadSessions(ctx, "app", []base.SessionRef{
			lk("u1", "s1"), lk("u1", "s2"), lk("u1", "s9"), lk("u2", "s1"), lk("u3", "adk"), lk("u4", "never"), lk("u1", "s1"),
		})
		must(t, err)
		var keys []base.SessionRef
		for _, s := range got.Sessions {
			keys = append(keys, s.Key)
		}
		slices.SortFunc(keys, func(a, b base.SessionRef) int { return strings.Compare(a.User+"/"+a.ID, b.User+"/"+b.ID) })
		same(t, "found", keys, []base.SessionRef{lk("u1", "s1"), lk("u1", "s1"), lk("u2", "s1"), lk("u3", "adk")})
		for _, sum := range got.Sessions {
			switch sum.Key {
			case lk("u2", "s1"):
				same(t, "u2/s1", []any{sum.Incarnation, sum.Rev, string(sum.State["count"]), sum.UpdateTime}, []any{inc2, int64(4), "4", eventTime(inc2, 4)})
			case lk("u3", "adk"):
				same(t, "ADK session", []any{sum.Incarnation, sum.Rev, sum.UpdateTime}, []any{adkCreateTime.UnixMicro(), int64(2), adkEventTime(2)})
			}
		}
		same(t, "user states", got.Users, map[string]map[string]json.RawMessage{
			"u1": state(1), "u2": {}, "u3": {"x": json.RawMessage("2")}, "u4": {},
		})
		empty, err := s.ReadSessions(ctx, "app", nil)
		must(t, err)
		same(t, "no keys", len(empty.Sessions), 0)
	})
}

func TestSessionTimes(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		s := migrated(t, b)
		listFixture(t, s)
		got, err := s.SessionTimes(context.Background(), "app", "u1")
		must(t, err)
		slices.SortFunc(got, func(a, b SessionTime) int { return strings.Compare(a.SessionID, b.SessionID) })
		same(t, "times", got, []SessionTime{{"s1", time.UnixMicro(inc1).UTC()}, {"s3", eventTime(inc1, 2)}})
	})
}

// listIndex is the index docs/persistence.md recommends to operators of
// large Postgres deployments (ADK's schema has none that serves listings:
// its sessions key starts with id in ADK JS's shape).
const listIndex = `CREATE INDEX adksession_list ON sessions (app_name, user_id COLLATE "C", id COLLATE "C")`

// TestListUsesIndex: a page of an app listing (and on SQLite the sessions of
// a user) are read through an index in byte order, not by scanning and
// sorting: on SQLite ADK's key, on Postgres the recommended index.
func TestListUsesIndex(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		s := migrated(t, b)
		if s.d.name == "postgres" {
			_, err := s.db.Exec(listIndex)
			must(t, err)
		}
		var ups []SessionUpsert
		for i := range 2000 {
			ups = append(ups, upsert(base.SessionRef{App: "app", User: fmt.Sprint("u", i%100), ID: fmt.Sprint("s", i)}, inc1, 0, 0))
		}
		apply(t, s, &Batch{Sessions: ups})
		if s.d.name == "postgres" {
			_, err := s.db.Exec(`ANALYZE sessions`)
			must(t, err)
		}
		index := "adksession_list"
		if s.d.name == "sqlite" {
			index = "sqlite_autoindex_sessions_1" // the primary key (app_name, user_id, id)
		}
		first, firstArgs := s.d.listQuery("app", base.SessionRef{}, 10)
		next, nextArgs := s.d.listQuery("app", base.SessionRef{App: "app", User: "u", ID: "s"}, 10)
		queries := []struct {
			name, q string
			args    []any
		}{{"first page", first, firstArgs}, {"next page", next, nextArgs}}
		if s.d.name == "sqlite" { // on Postgres rebuilding a user's index (seldom) may scan
			queries = append(queries, struct {
				name, q string
				args    []any
			}{"user", s.d.timesQuery(), []any{"app", "u7"}})
		}
		for _, q := range queries {
			plan := explain(t, s, q.q, q.args)
			t.Log(q.name, plan)
			if !strings.Contains(plan, index) || strings.Contains(plan, "TEMP B-TREE") || strings.Contains(plan, "Sort") {
				t.Fatalf("%s: plan does not walk %s in order:\n%s", q.name, index, plan)
			}
		}
	})
}
