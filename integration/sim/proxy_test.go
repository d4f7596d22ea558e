package sim

// dropProxy sits between a Service and Redis and, when armed, lets one
// command through to Redis and drops its reply, closing the connection: a
// reply lost on the network. go-redis then sends the command again on a new
// connection (it retries after io.EOF), so Redis runs it twice. Armed with
// an outage instead, it answers that command and then cuts every connection
// for a while, as a Redis restarting would.

import (
	"bytes"
	"net"
	"sync"
	"testing"
	"time"
)

type dropProxy struct {
	ln     net.Listener
	target string

	mu      sync.Mutex
	armed   []byte        // a command carrying these bytes loses its reply (or starts the outage); nil: none
	outage  time.Duration // 0: lose the reply; otherwise cut connections for this long after the reply
	down    time.Time     // connections are cut until then
	dropped int
	before  func() // armBefore: run before the armed command goes to Redis
}

func startDropProxy(t *testing.T, target string) *dropProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &dropProxy{ln: ln, target: target}
	t.Cleanup(func() { ln.Close() })
	go p.serve()
	return p
}

func (p *dropProxy) URL() string { return "redis://" + p.ln.Addr().String() + "/0" }

// arm makes the next command whose request contains marker lose its reply.
func (p *dropProxy) arm(marker string) { p.armFor(marker, 0) }

// armFor: the next command whose request contains marker is answered, then
// every connection is cut for d (0: the command loses its reply instead).
func (p *dropProxy) armFor(marker string, d time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.armed, p.outage = []byte(marker), d
}

// armBefore makes the next command whose request contains marker wait for
// f before it goes to Redis (its reply is not dropped): a fault that lands
// between two commands of one call.
func (p *dropProxy) armBefore(marker string, f func()) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.armed, p.outage, p.before = []byte(marker), 0, f
}

func (p *dropProxy) isDown() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return time.Now().Before(p.down)
}

func (p *dropProxy) droppedReplies() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.dropped
}

func (p *dropProxy) serve() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		if p.isDown() {
			c.Close()
			continue
		}
		go p.handle(c)
	}
}

func (p *dropProxy) handle(client net.Conn) {
	server, err := net.Dial("tcp", p.target)
	if err != nil {
		client.Close()
		return
	}
	var drop sync.Mutex
	dropNext, outage := false, time.Duration(0)
	closeBoth := func() { client.Close(); server.Close() }
	go func() {
		defer closeBoth()
		buf := make([]byte, 64<<10)
		for {
			n, err := client.Read(buf)
			if n > 0 {
				p.mu.Lock()
				var before func()
				if p.armed != nil && bytes.Contains(buf[:n], p.armed) {
					p.armed, before, p.before = nil, p.before, nil
					if before == nil {
						p.dropped++
						drop.Lock()
						dropNext, outage = p.outage == 0, p.outage
						drop.Unlock()
					}
				}
				p.mu.Unlock()
				if before != nil {
					before()
				}
				if p.isDown() {
					return
				}
				if _, err := server.Write(buf[:n]); err != nil {
					return
				}
			}
			if err != nil {
				return
			}
		}
	}()
	defer closeBoth()
	buf := make([]byte, 64<<10)
	for {
		n, err := server.Read(buf)
		drop.Lock()
		d := dropNext
		drop.Unlock()
		if d && n > 0 {
			return // the reply reached us, not the client
		}
		if n > 0 {
			// The outage starts before the reply goes on: a client that
			// sends its next command as soon as it has the reply must find
			// Redis gone (set after the write, the next command could slip
			// through on a loaded machine).
			drop.Lock()
			if outage > 0 {
				p.mu.Lock()
				p.down = time.Now().Add(outage)
				p.mu.Unlock()
				outage = 0
			}
			drop.Unlock()
			if _, err := client.Write(buf[:n]); err != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}
