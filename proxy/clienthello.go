package proxy

import (
	"bytes"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"slices"
	"time"
)

// maxClientHelloBytes bounds what the front reads before deciding. A
// ClientHello with post-quantum key shares is about 1.6 KB; TLS caps a
// handshake message at 64 KiB plus record headers.
const maxClientHelloBytes = 70 << 10

// extensionECH is the encrypted_client_hello extension (RFC 9849): the
// real server name is hidden in it.
const extensionECH = 0xfe0d

// ClientHello is what the front needs from a TLS ClientHello.
type ClientHello struct {
	// ECH says the hello carries an encrypted inner hello, whose server
	// name is not ServerName.
	ECH        bool
	ServerName string   // SNI, as sent; empty when absent
	ALPN       []string // offered application protocols
}

var errHelloRead = errors.New("client hello read")

// readClientHello reads one whole ClientHello from r, across as many TCP
// segments and TLS records as it spans, and returns it with every byte read
// so that the connection can be replayed to a TLS server or spliced
// upstream. The parsing is crypto/tls's own: a server handshake that stops
// at GetConfigForClient. Nothing is written to the client.
func readClientHello(r io.Reader) (*ClientHello, []byte, error) {
	rec := &recordingConn{r: io.LimitReader(r, maxClientHelloBytes)}
	var hello *ClientHello
	cfg := &tls.Config{
		GetConfigForClient: func(h *tls.ClientHelloInfo) (*tls.Config, error) {
			hello = &ClientHello{ServerName: h.ServerName, ALPN: append([]string(nil), h.SupportedProtos...),
				ECH: slices.Contains(h.Extensions, extensionECH)}
			return nil, errHelloRead
		},
	}
	err := tls.Server(rec, cfg).Handshake()
	if hello != nil {
		return hello, rec.buf.Bytes(), nil
	}
	if err == nil {
		err = errors.New("handshake ended without a ClientHello")
	}
	return nil, rec.buf.Bytes(), fmt.Errorf("not a TLS ClientHello: %w", err)
}

// recordingConn feeds crypto/tls from a reader, records what it read, and
// swallows what it writes (the alert tls sends when we stop it).
type recordingConn struct {
	r   io.Reader
	buf bytes.Buffer
}

func (c *recordingConn) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.buf.Write(p[:n])
	return n, err
}

func (c *recordingConn) Write(p []byte) (int, error)      { return len(p), nil }
func (c *recordingConn) Close() error                     { return nil }
func (c *recordingConn) LocalAddr() net.Addr              { return nil }
func (c *recordingConn) RemoteAddr() net.Addr             { return nil }
func (c *recordingConn) SetDeadline(time.Time) error      { return nil }
func (c *recordingConn) SetReadDeadline(time.Time) error  { return nil }
func (c *recordingConn) SetWriteDeadline(time.Time) error { return nil }

// replayConn is a connection whose first reads return bytes already read
// from it.
type replayConn struct {
	net.Conn
	pending []byte
}

func (c *replayConn) Read(p []byte) (int, error) {
	if len(c.pending) > 0 {
		n := copy(p, c.pending)
		c.pending = c.pending[n:]
		return n, nil
	}
	return c.Conn.Read(p)
}

// CloseWrite half-closes when the underlying connection can, so a splice can
// pass on one direction's end.
func (c *replayConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return c.Conn.Close()
}
