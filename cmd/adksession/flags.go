package main

import (
	"flag"
	"fmt"
	"io"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/adksession/adksession/service"
)

// storeFlags are the flags every command that reaches the data shares.
type storeFlags struct {
	redisURL, databaseURL, namespace string
	shards                           int
	allowAllKeysEviction             bool
	flushLeaseTTL                    time.Duration
}

func (f *storeFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&f.redisURL, "redis", "", "Redis `URL`: redis://[user:pass@]host:port/db, rediss://... (TLS), redis+cluster://h1:p1,h2:p2 (env REDIS_URL)")
	fs.StringVar(&f.databaseURL, "database", "", "database `URL` of the write-behind: postgres://... or sqlite:///abs/path.db (env DATABASE_URL)")
	fs.StringVar(&f.namespace, "namespace", "", "prefix of every Redis key, so deployments can share one Redis (env ADKSESSION_NAMESPACE)")
	fs.IntVar(&f.shards, "shards", 0, "hash-tag shards users are spread over; fixed for the life of the data (default 64)")
	fs.BoolVar(&f.allowAllKeysEviction, "allow-allkeys-eviction", false, "accept a Redis maxmemory-policy allkeys-* with a database, although it may evict unflushed writes")
	fs.DurationVar(&f.flushLeaseTTL, "flush-lease-ttl", 0, "how long the shards of a flusher that died wait before another takes them (default 15s, at least 1s)")
}

// resolve fills unset flags from the environment.
func (f *storeFlags) resolve() {
	f.redisURL = orEnv(f.redisURL, "REDIS_URL")
	f.databaseURL = orEnv(f.databaseURL, "DATABASE_URL")
	f.namespace = orEnv(f.namespace, "ADKSESSION_NAMESPACE")
}

// config is the service configuration the flags name.
func (f *storeFlags) config() service.Config {
	return service.Config{RedisURL: f.redisURL, DatabaseURL: f.databaseURL, Namespace: f.namespace, Shards: f.shards,
		AllowAllKeysEviction: f.allowAllKeysEviction, FlushLeaseTTL: f.flushLeaseTTL}
}

// registerDrainTimeout registers --drain-timeout and its old name,
// --shutdown-timeout, on the same variable (30 s).
func registerDrainTimeout(fs *flag.FlagSet, v *time.Duration, usage string) {
	fs.DurationVar(v, "drain-timeout", 30*time.Second, usage)
	fs.DurationVar(v, "shutdown-timeout", 30*time.Second, "old name of --drain-timeout")
}

// checkDrainTimeout refuses a drain without a budget.
func checkDrainTimeout(d time.Duration) error {
	if d <= 0 {
		return fmt.Errorf("--drain-timeout must be positive, got %v", d)
	}
	return nil
}

// listFlag is a flag that may be given several times, each time one value
// or several separated by commas.
type listFlag []string

func (l *listFlag) String() string { return strings.Join(*l, ",") }

func (l *listFlag) Set(v string) error {
	for _, s := range strings.Split(v, ",") {
		if s = strings.TrimSpace(s); s != "" {
			*l = append(*l, s)
		}
	}
	return nil
}

// orEnvList is l, or when empty the comma-separated list in env.
func orEnvList(l listFlag, env string) listFlag {
	if len(l) == 0 {
		l.Set(os.Getenv(env))
	}
	return l
}

func orEnv(v, env string) string {
	if v != "" {
		return v
	}
	return os.Getenv(env)
}

// newFlagSet returns a FlagSet whose --help prints the command's synopsis
// and explanation, then its flags.
func newFlagSet(name, synopsis, about string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet("adksession "+name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintf(stderr, "Usage: adksession %s %s\n\n%s\n\nFlags:\n", name, synopsis, strings.TrimSpace(about))
		fs.PrintDefaults()
	}
	return fs
}

// parse parses args; errors and --help are already reported by fs.
func parse(fs *flag.FlagSet, args []string) error {
	if err := fs.Parse(args); err != nil {
		if err == flag.ErrHelp {
			return err
		}
		return errUsage
	}
	return nil
}

// redact hides the password of a URL for printing.
func redact(raw string) string {
	u, err := url.Parse(raw)
	if err != nil || u.User == nil {
		return raw
	}
	if _, ok := u.User.Password(); ok {
		u.User = url.UserPassword(u.User.Username(), "xxxxx")
	}
	return u.String()
}
