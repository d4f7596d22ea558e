package persist

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"net/url"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// backend makes fresh databases of one kind for the contract tests.
type backend struct {
	name string
	// newURL returns the URL of a new, empty database that is removed when
	// the test ends. It skips the test when the backend is unavailable.
	newURL func(t testing.TB) string
}

var backends = []backend{
	{name: "sqlite", newURL: sqliteURL},
	{name: "postgres", newURL: postgresURL},
}

func sqliteURL(t testing.TB) string {
	return "sqlite://" + filepath.Join(t.TempDir(), "adksession.db")
}

// postgresURL creates a database on the server of ADKSESSION_TEST_DATABASE_URL
// and drops it when the test ends. Without that variable the test is skipped,
// or fails when ADKSESSION_TEST_REQUIRE=1.
func postgresURL(t testing.TB) string {
	base := os.Getenv("ADKSESSION_TEST_DATABASE_URL")
	if base == "" {
		if os.Getenv("ADKSESSION_TEST_REQUIRE") == "1" {
			t.Fatal("ADKSESSION_TEST_DATABASE_URL is not set and ADKSESSION_TEST_REQUIRE=1")
		}
		t.Skip("ADKSESSION_TEST_DATABASE_URL is not set")
	}
	admin, err := sql.Open("postgres", base)
	must(t, err)
	defer admin.Close()
	var b [8]byte
	rand.Read(b[:])
	name := "adksession_test_" + hex.EncodeToString(b[:])
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, err = admin.ExecContext(ctx, "CREATE DATABASE "+name)
	must(t, err)
	t.Cleanup(func() {
		admin, err := sql.Open("postgres", base)
		if err != nil {
			t.Errorf("drop database %s: %v", name, err)
			return
		}
		defer admin.Close()
		if _, err := admin.Exec("DROP DATABASE " + name + " WITH (FORCE)"); err != nil {
			t.Errorf("drop database %s: %v", name, err)
		}
	})
	u, err := url.Parse(base)
	must(t, err)
	u.Path = "/" + name
	return u.String()
}

// migrated returns an open Store on a fresh, migrated database of b.
func migrated(t testing.TB, b backend) *Store {
	s, _ := migratedAt(t, b)
	return s
}

// migratedAt is migrated that also returns the database's URL.
func migratedAt(t testing.TB, b backend) (*Store, string) {
	t.Helper()
	u := b.newURL(t)
	ctx := context.Background()
	must(t, Migrate(ctx, u))
	s, err := Open(ctx, u)
	must(t, err)
	t.Cleanup(func() { s.Close() })
	return s, u
}

// eachBackend runs f as a parallel subtest per backend.
func eachBackend(t *testing.T, f func(t *testing.T, b backend)) {
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			f(t, b)
		})
	}
}
