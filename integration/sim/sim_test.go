package sim

import (
	"context"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/adksession/adksession/service"
)

var (
	simSteps    = flag.Int("sim.steps", 0, "operations per client per seed (0: the CI default of each mode)")
	simDuration = flag.Duration("sim.duration", 0, "run one seed after another until this much time has passed")
	simSeed     = flag.Int64("sim.seed", 0, "the seed to run (0: the mode's CI seed in a bounded run, random seeds with -sim.random or -sim.duration); a failing run prints its seed")
	simRandom   = flag.Bool("sim.random", false, "a bounded run draws a random seed instead of the mode's CI seed")
	simClients  = flag.Int("sim.clients", 0, "clients of the concurrent mode (default 4)")
	simHistory  = flag.String("sim.history", "", "directory for run histories (default $TMPDIR/adksession-sim)")
	simKeep     = flag.Bool("sim.keep", false, "write the history of passing runs too")
	simBehind   = flag.Bool("sim.behind", true, "the concurrent mode runs the Redis-behind-the-database faults and the ADK writer too (the single mode always does); -sim.behind=false leaves them out")
)

// quiet drops go-redis's own log lines (a dial refused while a fault runs
// is expected; the history records what matters).
type quiet struct{}

func (quiet) Printf(context.Context, string, ...any) {}

func init() { redis.SetLogger(quiet{}) }

// mode is one flavour of run.
type mode struct {
	name         string
	sh           shape
	steps, every int   // CI default: operations per client, and between checkpoints
	ciSeed       int64 // the seed of a bounded run without -sim.seed or -sim.random
}

func modes(cluster bool) []mode {
	clients := 4
	if *simClients > 0 {
		clients = *simClients
	}
	// CI runs fixed seeds (each passed long runs of the final code), so that
	// its verdict is about the change under test, not about the draw; new
	// seeds are explored with -sim.random or -sim.duration (docs/simulation.md).
	single, concurrent := int64(605380879958), int64(527082694270)
	if cluster {
		single, concurrent = 742397407673, 864327449962
	}
	return []mode{
		// One client: the operations, and their order, are a pure function of the seed.
		{"single", shape{Clients: 1, Slots: 6, Users: 3, Apps: 2, Services: 3, Shared: 1, Cluster: cluster, Faults: true, Behind: true}, 480, 60, single},
		// Several clients over several services, faults meanwhile.
		{"concurrent", shape{Clients: clients, Slots: 4, Users: 3, Apps: 2, Services: 3, Shared: 2, Cluster: cluster, Faults: true, Behind: *simBehind}, 160, 40, concurrent},
	}
}

// TestSim runs the model-based test on a standalone Redis and on a cluster,
// each with a private Postgres: bounded by default, for hours with -sim.duration.
func TestSim(t *testing.T) {
	for _, cluster := range []bool{false, true} {
		name := "standalone"
		if cluster {
			name = "cluster"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			srv := startServers(t, cluster)
			for _, m := range modes(cluster) {
				t.Run(m.name, func(t *testing.T) { runMode(t, srv, m) })
			}
		})
	}
}

// runMode runs one seed, or seeds one after another for -sim.duration.
func runMode(t *testing.T, srv *servers, m mode) {
	steps := m.steps
	if *simSteps > 0 {
		steps = *simSteps
	}
	deadline := time.Now().Add(*simDuration)
	var runs int
	var ops int64
	for {
		seed := *simSeed
		switch {
		case seed != 0:
		case *simDuration == 0 && !*simRandom:
			seed = m.ciSeed
		default:
			seed = rand.Int64N(1 << 40)
		}
		n, ok := runSeed(t, srv, m, seed, steps)
		runs++
		ops += n
		if !ok || *simSeed != 0 || time.Now().After(deadline) {
			break
		}
	}
	t.Logf("sim %s: %d seeds, %d operations", t.Name(), runs, ops)
}

// runSeed runs one seed; it reports the operations run and whether it passed.
func runSeed(t *testing.T, srv *servers, m mode, seed int64, steps int) (int64, bool) {
	t.Logf("seed %d: %d clients x %d operations (replay: go test ./integration/sim/ -run '%s' -sim.seed=%d -sim.steps=%d)",
		seed, m.sh.Clients, steps, t.Name(), seed, steps)
	e := newEnv(t, srv, m.sh, seed)
	defer e.close()
	d := &driver{t: t, sh: m.sh, seed: seed, e: e, m: newModel(), faults: make(chan *faultReq),
		stopCh: make(chan struct{}), ever: map[sessKey]bool{}, shared: map[sessKey]bool{},
		hist: newHistory(fmt.Sprintf("adksession simulation: test %s, seed %d, %d clients x %d operations, checkpoint every %d",
			t.Name(), seed, m.sh.Clients, steps, m.every), fmt.Sprintf("shape %+v", m.sh), "started "+time.Now().UTC().Format(time.RFC3339))}
	ok := d.setup()
	if ok {
		d.run(steps, m.every)
	}
	d.failMu.Lock()
	failure := d.failed
	d.failMu.Unlock()
	if failure != "" || *simKeep {
		dir := *simHistory
		if dir == "" {
			dir = filepath.Join(os.TempDir(), "adksession-sim")
		}
		name := fmt.Sprintf("%s-seed%d.txt", strings.NewReplacer("/", "-").Replace(t.Name()), seed)
		path, err := d.hist.write(dir, name)
		if err != nil {
			t.Logf("writing the history: %v", err)
		}
		if failure != "" {
			t.Errorf("seed %d failed after %d operations: %s\nhistory: %s\nlast operations:\n%s", seed, d.ops.Load(), failure, path,
				strings.Join(d.hist.tail(30), "\n"))
		} else {
			t.Logf("history: %s", path)
		}
	}
	var counts []string
	for k := range d.counts {
		if n := d.counts[k].Load(); n > 0 {
			counts = append(counts, fmt.Sprintf("%s=%d", opKind(k), n))
		}
	}
	if n := d.knownDup.Load(); n > 0 {
		counts = append(counts, fmt.Sprintf("known-dup-over-db=%d", n))
	}
	if n := d.dbDup.Load(); n > 0 {
		counts = append(counts, fmt.Sprintf("known-dup-from-db=%d", n))
	}
	if n := d.views.Load(); n > 0 {
		counts = append(counts, fmt.Sprintf("compacted-views=%d (compared=%d)", n, d.viewsCompared.Load()))
	}
	var kinds []string
	for k, n := range d.kinds {
		kinds = append(kinds, fmt.Sprintf("%s=%d", k, n))
	}
	sort.Strings(kinds)
	if len(kinds) > 0 {
		counts = append(counts, "faults:")
		counts = append(counts, kinds...)
	}
	t.Logf("seed %d: %d operations (%s)", seed, d.ops.Load(), strings.Join(counts, " "))
	return d.ops.Load(), failure == ""
}

// setup creates the clients and the shared sessions.
func (d *driver) setup() bool {
	for i := range d.sh.Clients {
		c := &client{d: d, id: i, gen: newGen(d.seed, i, d.sh)}
		for s := range d.sh.Slots {
			c.slots = append(c.slots, &slot{key: d.sh.slotKey(i, s)})
		}
		for s := range d.sh.Shared {
			c.shared = append(c.shared, &slot{key: d.sh.sharedKey(s), shared: true})
		}
		d.clients = append(d.clients, c)
	}
	ctx, cancel := opCtx()
	defer cancel()
	for s := range d.sh.Shared {
		k := d.sh.sharedKey(s)
		resp, err := d.e.svcs[0].Create(ctx, &service.CreateRequest{AppName: k.App, UserID: k.User, SessionID: k.SID})
		if err != nil {
			d.failf("create shared session %v: %v", k, err)
			return false
		}
		d.m.created(k, resp.Session.LastUpdateTime().UnixMicro(), nil)
		d.shared[k] = true
		d.markCreated(k)
	}
	if d.sh.Clients > 1 {
		d.e.startFlushers(2)
	}
	return true
}

// run runs the clients in rounds of every operations, with a checkpoint
// after each round, serving fault requests meanwhile.
func (d *driver) run(steps, every int) {
	arrive := make(chan int)
	rounds := make([]chan int, len(d.clients))
	var wg sync.WaitGroup
	for i, c := range d.clients {
		rounds[i] = make(chan int)
		wg.Add(1)
		go func() {
			defer wg.Done()
			c.run(rounds[i], arrive, every)
		}()
	}
	for r := 0; r*every < steps && !d.stopped(); r++ {
		for _, ch := range rounds {
			ch <- r
		}
		for n := 0; n < len(d.clients); {
			select {
			case req := <-d.faults:
				d.serveFault(req)
			case <-arrive:
				n++
			}
		}
		if !d.stopped() {
			d.checkpoint(r)
		}
	}
	for _, ch := range rounds {
		close(ch)
	}
	wg.Wait()
	d.releaseHold()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	d.e.stopFlushers(ctx)
}
