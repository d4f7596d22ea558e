package integration

import (
	"encoding/binary"
	"errors"
	"io"
	"net"
	"net/url"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"
)

// pgCounter is a TCP proxy in front of Postgres that counts the statements
// its clients run (extended-protocol Execute ('E') and simple Query ('Q')
// messages) and the rows the server returns (DataRow, 'D'). Tests point a
// Service at it to prove how many queries a call costs and how many rows it
// reads, whatever the code in between does.
type pgCounter struct {
	ln         net.Listener
	target     string
	statements atomic.Int64
	rows       atomic.Int64
	mu         sync.Mutex
	conns      []net.Conn
}

// startPGCounter starts a counter in front of the database of dbURL
// (sslmode=disable) and returns it with the URL that goes through it.
func startPGCounter(t testing.TB, dbURL string) (*pgCounter, string) {
	t.Helper()
	u, err := url.Parse(dbURL)
	require.NoError(t, err)
	require.Equal(t, "disable", u.Query().Get("sslmode"), "the counter reads the protocol in clear")
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	p := &pgCounter{ln: ln, target: u.Host}
	go p.accept()
	t.Cleanup(p.close)
	u.Host = ln.Addr().String()
	return p, u.String()
}

// Statements returns the number of statements run since the last Reset.
func (p *pgCounter) Statements() int64 { return p.statements.Load() }

// Rows returns the number of rows the server sent (DataRow messages) since
// the last Reset.
func (p *pgCounter) Rows() int64 { return p.rows.Load() }

// Reset sets the counts to zero.
func (p *pgCounter) Reset() { p.statements.Store(0); p.rows.Store(0) }

func (p *pgCounter) accept() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		s, err := net.Dial("tcp", p.target)
		if err != nil {
			c.Close()
			continue
		}
		p.mu.Lock()
		p.conns = append(p.conns, c, s)
		p.mu.Unlock()
		go func() {
			p.back(c, s)
			c.Close()
		}()
		go func() {
			p.forward(s, c)
			s.Close()
		}()
	}
}

// forward copies client messages to the server, counting statements. The
// first message (startup, or a cancel request) has no type byte.
func (p *pgCounter) forward(dst io.Writer, src io.Reader) {
	var head [5]byte
	if _, err := io.ReadFull(src, head[:4]); err != nil {
		return
	}
	if err := copyBody(dst, src, head[:4], binary.BigEndian.Uint32(head[:4])); err != nil {
		return
	}
	for {
		if _, err := io.ReadFull(src, head[:]); err != nil {
			return
		}
		if head[0] == 'E' || head[0] == 'Q' {
			p.statements.Add(1)
		}
		if err := copyBody(dst, src, head[:], binary.BigEndian.Uint32(head[1:])); err != nil {
			return
		}
	}
}

// back copies server messages to the client, counting rows ('D'). Every
// server message has a type byte (the counter refuses TLS).
func (p *pgCounter) back(dst io.Writer, src io.Reader) {
	var head [5]byte
	for {
		if _, err := io.ReadFull(src, head[:]); err != nil {
			return
		}
		if head[0] == 'D' {
			p.rows.Add(1)
		}
		if err := copyBody(dst, src, head[:], binary.BigEndian.Uint32(head[1:])); err != nil {
			return
		}
	}
}

// copyBody writes head and the rest of a message whose length field (which
// counts itself) is n.
func copyBody(dst io.Writer, src io.Reader, head []byte, n uint32) error {
	if n < 4 {
		return errors.New("bad message length")
	}
	if _, err := dst.Write(head); err != nil {
		return err
	}
	_, err := io.CopyN(dst, src, int64(n-4))
	return err
}

func (p *pgCounter) close() {
	p.ln.Close()
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.conns {
		c.Close()
	}
}
