package main

import (
	"context"
	"fmt"
	"io"

	"github.com/adksession/adksession/service"
)

const migrateAbout = `Creates the database schema (ADK's v1 DatabaseSessionService tables plus adksession's
bookkeeping) or upgrades it to this version. Safe to run again: applied migrations are skipped.
A database ADK Python or ADK JS created is upgraded in place.`

func runMigrate(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var f storeFlags
	fs := newFlagSet("migrate", "[--database URL]", migrateAbout, stderr)
	fs.StringVar(&f.databaseURL, "database", "", "database `URL`: postgres://... or sqlite:///abs/path.db (env DATABASE_URL)")
	if err := parse(fs, args); err != nil {
		return err
	}
	f.resolve()
	if f.databaseURL == "" {
		fmt.Fprintln(stderr, "adksession migrate: no database: give --database or DATABASE_URL")
		return errUsage
	}
	fmt.Fprintf(stderr, "migrating %s ...\n", redact(f.databaseURL))
	if err := service.Migrate(ctx, f.databaseURL); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "database %s: schema current\n", redact(f.databaseURL))
	return nil
}
