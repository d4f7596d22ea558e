// Command adksession runs adksession, the session service for ADK agents:
// the HTTP API with its dashboard (serve), the write-behind flusher alone
// (flush), database migrations (migrate), a look at one session (inspect),
// retention (prune) and the load generator (bench). `adksession serve` with no flags and no
// environment starts an embedded Redis and a SQLite file, so it runs on a
// machine with nothing installed.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
)

const usage = `adksession: a session service for ADK agents, cache-first on Redis with write-behind to a database.

Usage:
  adksession serve    [flags]                  HTTP API, dashboard, metrics (embedded Redis + SQLite with no flags)
  adksession flush    [flags]                  run the write-behind flusher only, until SIGTERM
  adksession migrate  [flags]                  create or upgrade the database schema
  adksession inspect  [flags] APP USER SESSION show a session: state by scope, events, flush status
  adksession prune    --idle-for 720h [flags]  delete sessions idle for that long (--dry-run counts)
  adksession bench    [flags]                  load generator: append/get throughput and latency

Run "adksession COMMAND --help" for the flags of a command. Flags fall back to the environment:
  REDIS_URL, DATABASE_URL, ADDR, AUTH_TOKEN, ALLOW_ORIGINS, ALLOW_HOSTS, ADKSESSION_NAMESPACE.
`

// command is one subcommand: it parses its own flags and runs.
type command func(ctx context.Context, args []string, stdout, stderr io.Writer) error

var commands = map[string]command{
	"serve":   runServe,
	"flush":   runFlush,
	"migrate": runMigrate,
	"inspect": runInspect,
	"prune":   runPrune,
	"bench":   runBench,
}

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// run dispatches to a subcommand and returns the exit code.
func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		fmt.Fprint(stderr, usage)
		if len(args) == 0 {
			return 2
		}
		return 0
	}
	cmd, ok := commands[args[0]]
	if !ok {
		fmt.Fprintf(stderr, "adksession: unknown command %q\n\n%s", args[0], usage)
		return 2
	}
	ctx, stop := signalContext()
	defer stop()
	err := cmd(ctx, args[1:], stdout, stderr)
	switch {
	case err == nil:
		return 0
	case errors.Is(err, flag.ErrHelp):
		return 0
	case errors.Is(err, errUsage):
		return 2
	}
	fmt.Fprintf(stderr, "adksession %s: %v\n", args[0], err)
	return 1
}

// errUsage reports bad flags or arguments; the FlagSet already said what.
var errUsage = errors.New("usage")
