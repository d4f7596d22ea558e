package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"time"

	"github.com/adksession/adksession/cmd/adksession/internal/progress"
	"github.com/adksession/adksession/service"
)

const pruneAbout = `Deletes every session whose last update is older than --idle-for, from the database (sessions,
events, bookkeeping) and from Redis, in batches of --batch sessions, one short transaction each,
while the fleet goes on appending: a session updated meanwhile is kept. The state of users and
apps left without sessions goes too, and the bookkeeping's tombstones (deleted sessions) once a
prune has known them for --tombstone-margin. --dry-run counts and deletes nothing. Shows a progress
bar on stderr and a summary (--json: the summary as JSON on stdout).`

func runPrune(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var f storeFlags
	fs := newFlagSet("prune", "--idle-for DURATION [flags]", pruneAbout, stderr)
	f.register(fs)
	idleFor := fs.Duration("idle-for", 0, "delete sessions not updated for this `long` (e.g. 720h; required)")
	app := fs.String("app", "", "prune only this `app`")
	dryRun := fs.Bool("dry-run", false, "count what would be deleted, delete nothing")
	batch := fs.Int("batch", 500, "sessions per database transaction")
	margin := fs.Duration("tombstone-margin", time.Hour, "purge a bookkeeping tombstone once a prune has known it this `long`")
	asJSON := fs.Bool("json", false, "write the summary as JSON on stdout")
	quiet := fs.Bool("quiet", false, "no progress bar")
	if err := parse(fs, args); err != nil {
		return err
	}
	f.resolve()
	if *idleFor <= 0 || f.redisURL == "" || f.databaseURL == "" {
		fmt.Fprintln(stderr, "adksession prune: give --idle-for, --redis (REDIS_URL) and --database (DATABASE_URL)")
		return errUsage
	}
	cfg := f.config()
	cfg.DisableFlusher = true // a prune writes no change log
	svc, err := openService(ctx, cfg)
	if err != nil {
		return err
	}
	defer svc.Close(context.Background())
	req := service.PruneRequest{IdleFor: *idleFor, AppName: *app, DryRun: *dryRun, BatchSize: *batch, TombstoneMargin: *margin}
	var bar *progress.Bar
	if !*quiet {
		label := "pruned"
		if *dryRun {
			label = "examined"
		}
		req.Progress = func(p service.PruneProgress) {
			if bar == nil {
				bar = progress.New(stderr, label, p.Total)
			}
			bar.Set(p.Examined)
		}
	}
	sum, err := svc.Prune(ctx, &req)
	if bar != nil {
		bar.Done()
	}
	if sum != nil {
		if *asJSON {
			writePruneJSON(stdout, sum)
		} else {
			writePruneSummary(stdout, sum, *margin)
		}
	}
	return err
}

// writePruneSummary writes what a prune did in a few lines.
func writePruneSummary(w io.Writer, s *service.PruneSummary, margin time.Duration) {
	verb := "pruned"
	if s.DryRun {
		verb = "would prune (dry run)"
	}
	rate := 0.0
	if s.Duration > 0 {
		rate = float64(s.Sessions) / s.Duration.Seconds()
	}
	fmt.Fprintf(w, "%s %d sessions, %d events, %s of JSON, idle since %s, in %s (%.0f sessions/s, %d batches)\n",
		verb, s.Sessions, s.Events, byteSize(s.Bytes), s.Cutoff.UTC().Format(time.RFC3339), s.Duration.Round(time.Millisecond), rate, s.Batches)
	fmt.Fprintf(w, "state rows of users left without sessions: %d, of apps: %d\n", s.UserStates, s.AppStates)
	fmt.Fprintf(w, "kept (updated while the prune ran): %d\n", s.Kept)
	fmt.Fprintf(w, "bookkeeping tombstones purged: %d; seen for the first time: %d (a prune purges them %s from now)\n",
		s.Tombstones, s.TombstonesSeen, margin)
}

// pruneJSON is the summary --json writes.
type pruneJSON struct {
	DryRun          bool    `json:"dryRun"`
	Cutoff          string  `json:"cutoff"`
	Sessions        int64   `json:"sessions"`
	Events          int64   `json:"events"`
	Bytes           int64   `json:"bytes"`
	UserStates      int64   `json:"userStates"`
	AppStates       int64   `json:"appStates"`
	Tombstones      int64   `json:"tombstones"`
	TombstonesSeen  int64   `json:"tombstonesSeen"`
	Kept            int64   `json:"kept"`
	Batches         int     `json:"batches"`
	DurationSeconds float64 `json:"durationSeconds"`
}

func writePruneJSON(w io.Writer, s *service.PruneSummary) {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.Encode(pruneJSON{DryRun: s.DryRun, Cutoff: s.Cutoff.UTC().Format(time.RFC3339Nano), Sessions: s.Sessions, Events: s.Events,
		Bytes: s.Bytes, UserStates: s.UserStates, AppStates: s.AppStates, Tombstones: s.Tombstones, TombstonesSeen: s.TombstonesSeen,
		Kept: s.Kept, Batches: s.Batches, DurationSeconds: s.Duration.Seconds()})
}

// byteSize writes n bytes for people: 1.5 MB.
func byteSize(n int64) string {
	const unit = 1000
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	f, i := float64(n), 0
	for f >= unit && i < 4 {
		f /= unit
		i++
	}
	return fmt.Sprintf("%.1f %cB", f, " kMGT"[i])
}

// retentionFlags set Config.Retention for the commands that run for long
// (serve, flush): the fleet's background prune.
type retentionFlags struct{ idleFor, interval time.Duration }

func (r *retentionFlags) register(fs *flag.FlagSet) {
	fs.DurationVar(&r.idleFor, "prune-idle-for", 0, "prune sessions idle this `long` in the background, once per --prune-interval across the fleet (default: never)")
	fs.DurationVar(&r.interval, "prune-interval", time.Hour, "how often the fleet prunes in the background")
}

func (r retentionFlags) apply(cfg *service.Config) {
	cfg.Retention = service.RetentionConfig{IdleFor: r.idleFor, Interval: r.interval}
}
