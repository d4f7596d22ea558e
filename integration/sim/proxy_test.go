package sim

// dropProxy sits between a Service and Redis and, when armed, lets one
// command through to Redis and drops its reply, closing the connection: a
// reply lost on the network. go-redis then sends the command again on a new
// connection (it retries after io.EOF), so Redis runs it twice.

import (
	"bytes"
	"net"
	"sync"
	"testing"
)

type dropProxy struct {
	ln     net.Listener
	target string

	mu      sync.Mutex
	armed   []byte // a command carrying these bytes loses its reply; nil: none
	dropped int
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
func (p *dropProxy) arm(marker string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.armed = []byte(marker)
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
	dropNext := false
	closeBoth := func() { client.Close(); server.Close() }
	go func() {
		defer closeBoth()
		buf := make([]byte, 64<<10)
		for {
			n, err := client.Read(buf)
			if n > 0 {
				p.mu.Lock()
				if p.armed != nil && bytes.Contains(buf[:n], p.armed) {
					p.armed = nil
					p.dropped++
					drop.Lock()
					dropNext = true
					drop.Unlock()
				}
				p.mu.Unlock()
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
			if _, err := client.Write(buf[:n]); err != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}
