package persist

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/adksession/adksession/integration/testenv"
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
	{name: "postgres", newURL: testenv.FreshDatabase},
}

func sqliteURL(t testing.TB) string {
	return "sqlite://" + filepath.Join(t.TempDir(), "adksession.db")
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
