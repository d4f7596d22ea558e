package sim

// A failover to a replica held behind (docs/simulation.md, "Faults"): one
// shard's replica stops applying its master's stream, writes go on, and the
// replica takes over holding the older data.
//
// The replica is held by killing it (SIGKILL) once it has caught up: its AOF
// (appendfsync always) keeps exactly what it had applied. A SIGSTOP does not
// hold it: the master's stream keeps arriving in the stopped process's socket
// buffer, and the replica applies it when it resumes. The failover kills the
// master, starts the replica from its AOF and makes it take over with CLUSTER
// FAILOVER TAKEOVER (no election: the master is down and the replica's data
// too old for one); the old master then comes back from its own files,
// learns that it lost its slots (the replica's config epoch is higher) and
// resynchronises from the new master as its replica.

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/adksession/adksession/integration/testenv"
)

// node is the cluster node at addr.
func (e *env) node(addr string) (*testenv.RedisServer, error) {
	for _, n := range e.cluster.Nodes {
		if n.Addr == addr {
			return n, nil
		}
	}
	return nil, fmt.Errorf("no cluster node %s", addr)
}

// masterOf is the address of the master that serves key: the running node
// that calls itself a master and serves the key's slot (a client's slot map
// may be older than the last failover).
func (e *env) masterOf(key string) (string, error) {
	deadline := time.Now().Add(time.Minute)
	for {
		addr, err := e.slotMaster(key)
		if err == nil || time.Now().After(deadline) {
			return addr, err
		}
		time.Sleep(50 * time.Millisecond) // a failover under way
	}
}

func (e *env) slotMaster(key string) (string, error) {
	var slot int
	for _, n := range e.cluster.Nodes {
		if !n.Running() {
			continue
		}
		v, err := testenv.RespDo(n.Addr, "CLUSTER", "KEYSLOT", key)
		if err != nil {
			return "", err
		}
		if slot, err = strconv.Atoi(v); err != nil {
			return "", err
		}
		break
	}
	for _, n := range e.cluster.Nodes {
		if !n.Running() {
			continue
		}
		nodes, err := testenv.RespDo(n.Addr, "CLUSTER", "NODES")
		if err != nil {
			return "", err
		}
		for _, line := range strings.Split(nodes, "\n") {
			f := strings.Fields(line)
			if len(f) < 8 || !strings.Contains(f[2], "myself") || !strings.Contains(f[2], "master") {
				continue
			}
			if testenv.ServesSlot(f[8:], slot) {
				return n.Addr, nil
			}
		}
	}
	return "", fmt.Errorf("no master serves slot %d of %q", slot, key)
}

// holdReplica stops a replica of the master at addr once it has caught up
// with it (nothing runs meanwhile: every write acknowledged before is in the
// replica's AOF) and returns it. It may have been demoted by a failover a
// moment before, while the services' slot maps still name it master: they
// reload their maps when it does not answer (cache.NewClient;
// TestDeadMasterInSlotMap).
func (e *env) holdReplica(master string) (string, error) {
	replica, err := e.readyReplica(master, time.Now().Add(time.Minute))
	if err != nil {
		return "", err
	}
	n, err := e.node(replica)
	if err != nil {
		return "", err
	}
	n.Kill(e.t)
	return replica, nil
}

// takeOverHeld makes the held replica the master of its shard, holding the
// data it had when it was held; the old master comes back as its replica,
// resynchronised. Nothing runs meanwhile (the single mode's client waits for
// the fault; the concurrent mode's clients are at a checkpoint).
func (e *env) takeOverHeld(master, replica string) error {
	m, err := e.node(master)
	if err != nil {
		return err
	}
	r, err := e.node(replica)
	if err != nil {
		return err
	}
	m.Kill(e.t)
	r.Start(e.t) // from its AOF: what it had applied when it was held
	deadline := time.Now().Add(time.Minute)
	// The held replica comes back with the epochs of when it was held; a
	// takeover from there can take a config epoch another master has (one
	// elected meanwhile), and the collision's rule hands the epoch bump to
	// the lower node id, which can be the old master once it is back: it
	// then won its slots back (seeds 53175492429 and 345361015657). So the
	// takeover waits until the replica has the cluster's current epoch.
	if err := e.waitEpoch(replica, deadline); err != nil {
		return err
	}
	for {
		// Asked again until it is a master (an election of its own, after
		// the others found the master failed, would do too).
		if me, err := clusterSelf(replica); err == nil && me.isMaster() {
			break
		}
		_, err := testenv.RespDo(replica, "CLUSTER", "FAILOVER", "TAKEOVER")
		if time.Now().After(deadline) {
			return fmt.Errorf("CLUSTER FAILOVER TAKEOVER on %s: not a master after a minute (%v)", replica, err)
		}
		time.Sleep(50 * time.Millisecond) // the node is still loading, or taking over
	}
	// The old master comes back only once every running node has the held
	// replica as the slots' master: it then learns at once that it lost them.
	if err := e.waitMaster(replica, deadline); err != nil {
		return err
	}
	m.Start(e.t)
	if e.elected == nil {
		e.elected = map[string]time.Time{}
	}
	e.elected[replica] = time.Now()
	if _, err := e.readyReplica(replica, deadline); err != nil {
		return fmt.Errorf("after the takeover of %s: %w", replica, err)
	}
	e.cluster.WaitHealthy(e.t, time.Until(deadline))
	return e.waitRedis(time.Until(deadline))
}

// waitEpoch waits until the node at addr has learnt the cluster's current
// epoch: its own is at least every running node's.
func (e *env) waitEpoch(addr string, deadline time.Time) error {
	for {
		mine, err := currentEpoch(addr)
		ok := err == nil
		for _, n := range e.cluster.Nodes {
			if ok && n.Running() && n.Addr != addr {
				theirs, err := currentEpoch(n.Addr)
				ok = err == nil && mine >= theirs
			}
		}
		if ok {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s did not learn the cluster's current epoch (%v)", addr, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// currentEpoch is cluster_current_epoch of the node at addr (CLUSTER INFO).
func currentEpoch(addr string) (int64, error) {
	info, err := testenv.RespDo(addr, "CLUSTER", "INFO")
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "cluster_current_epoch:"); ok {
			return strconv.ParseInt(v, 10, 64)
		}
	}
	return 0, fmt.Errorf("CLUSTER INFO of %s: no cluster_current_epoch", addr)
}

// waitMaster waits until the node at addr calls itself a master with slots
// and every running node calls it a master.
func (e *env) waitMaster(addr string, deadline time.Time) error {
	for {
		me, err := clusterSelf(addr)
		ok := err == nil && me.isMaster() && me.slots > 0
		for _, n := range e.cluster.Nodes {
			if !ok || !n.Running() {
				continue
			}
			_, byID, err := clusterNodes(n.Addr)
			ok = err == nil && byID[me.id].isMaster() && byID[me.id].slots > 0
		}
		if ok {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s did not become master of its slots: %+v (%v)", addr, me, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// releaseHeld starts a held replica again without a failover (a run that
// ended before its regress): it catches up with its master.
func (e *env) releaseHeld(master, replica string) error {
	r, err := e.node(replica)
	if err != nil {
		return err
	}
	r.Start(e.t)
	deadline := time.Now().Add(time.Minute)
	if _, err := e.readyReplica(master, deadline); err != nil {
		return err
	}
	e.cluster.WaitHealthy(e.t, time.Until(deadline))
	return nil
}
