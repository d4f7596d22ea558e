// Package sim is adksession's model-based, fault-injecting test and its soak. It has no code of
// its own outside its tests:
//
//   - model_test.go is a reference model of the contract (the README's consistency model and docs/design.md): sessions, events, the four
//     scopes, temp state per invocation, windows, stale and concurrent handles, delete and re-create, rewind,
//     event-id idempotency, lists, and the rows the database must hold.
//   - gen_test.go generates operations as a pure function of a seed; driver_test.go runs them from several
//     concurrent clients over several Service instances against real Redis (standalone or a cluster) and a
//     real Postgres, interleaved with faults (on the private servers of env_test.go), and check_test.go
//     compares every answer, and at each checkpoint everything in Redis and every row in Postgres, with the
//     model.
//   - behind_test.go adds the faults that leave Redis behind the database (a restart from an older RDB
//     snapshot, a failover to a replica held behind in hold_test.go, an old copy of a session's keys put
//     back, a FLUSHALL or eviction while a flusher's batch waits on a Postgres lock in inflight_test.go)
//     and an ADK Python writer appending rows to the database; the model then holds Redis's older copy as a second view of the session until it converges
//     (docs/simulation.md, "Redis behind the database"; in both modes, -sim.behind=false leaves them out of the
//     concurrent one).
//   - soak_test.go runs a sustained mixed load against a Redis with maxmemory and records memory, flush lag,
//     backlog, goroutines and heap over time; svg_test.go draws them.
//
// Run it (servers from integration/testenv.sh or /tmp/devenv.sh):
//
//	go test -race -count=1 ./integration/sim/                              # the bounded CI runs
//	go test -count=1 -timeout 0 ./integration/sim/ -run 'TestSim/standalone' -sim.duration=1h
//	go test -count=1 ./integration/sim/ -run 'TestSim/standalone/single' -sim.seed=1234 -sim.steps=2000
//	go test -count=1 -timeout 0 ./integration/sim/ -run TestSoak -soak.duration=10m -soak.out=$PWD/docs
//
// A failing run prints its seed and the path of its history (every operation and its result, in order).
package sim
