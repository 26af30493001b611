package proxy

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"testing"
	"time"
)

// stillServes checks that the proxy answers a good request afterwards.
func stillServes(t *testing.T, r *rig, ew *exactWorld) {
	t.Helper()
	resp, err := r.transparentClient(ew.exact.addr, false).Get(url(ew.exact, "/ok"))
	if err != nil {
		t.Fatalf("proxy stopped serving: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("proxy answers %d after bad input", resp.StatusCode)
	}
}

// expectCleanEnd reads what the proxy sends after bad input: a 4xx status,
// or a close, within the deadline; never a hang.
func expectCleanEnd(t *testing.T, c net.Conn, br *bufio.Reader, what string) {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(15 * time.Second))
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		if ne, ok := err.(net.Error); ok && ne.Timeout() {
			t.Fatalf("%s: the proxy hung", what)
		}
		return // closed: clean
	}
	resp.Body.Close()
	if resp.StatusCode < 400 || resp.StatusCode > 499 {
		t.Fatalf("%s: got %d, want a 4xx or a close", what, resp.StatusCode)
	}
}

func TestBadInput(t *testing.T) {
	ew := newExactWorld(t)
	r := ew.rig(t, "deny web exact.example.test DELETE\ndefault allow\n")
	host := fmt.Sprintf("exact.example.test:%d", ew.exact.addr.Port())

	t.Run("malformed ClientHello", func(t *testing.T) {
		r.divert(ew.exact.addr)
		c, err := net.Dial("tcp", r.transparent)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		// A whole record whose ClientHello is nonsense.
		c.Write([]byte{0x16, 0x03, 0x01, 0x00, 0x08, 0x01, 0x00, 0x00, 0x04, 0xde, 0xad, 0xbe, 0xef})
		expectCleanEnd(t, c, bufio.NewReader(c), "malformed ClientHello")
	})
	t.Run("plain bytes on 443", func(t *testing.T) {
		dst := ew.exact.addr
		r.divert(netAddrPort(dst.Addr().String(), 443))
		c, _ := net.Dial("tcp", r.transparent)
		defer c.Close()
		fmt.Fprintf(c, "GET / HTTP/1.1\r\nHost: exact.example.test\r\n\r\n")
		expectCleanEnd(t, c, bufio.NewReader(c), "plain HTTP on 443")
	})
	t.Run("garbage after CONNECT", func(t *testing.T) {
		c, _ := net.Dial("tcp", r.explicit)
		defer c.Close()
		br := bufio.NewReader(c)
		fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", host, host)
		c.SetReadDeadline(time.Now().Add(10 * time.Second))
		resp, err := http.ReadResponse(br, nil)
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("CONNECT: %v %v", resp, err)
		}
		c.Write([]byte("\x00\x01\x02 not http at all\r\n\r\n"))
		expectCleanEnd(t, c, br, "garbage in tunnel")
	})
	cases := map[string]string{
		"1 MB request line":     "GET /" + strings.Repeat("a", 1<<20) + " HTTP/1.1\r\nHost: " + host + "\r\n\r\n",
		"header flood":          "GET / HTTP/1.1\r\nHost: " + host + "\r\n" + strings.Repeat("X-Flood: aaaaaaaaaaaaaaaaaaaaaaaa\r\n", 20000) + "\r\n",
		"chunk size overflow":   "POST /upload HTTP/1.1\r\nHost: " + host + "\r\nTransfer-Encoding: chunked\r\n\r\nfffffffffffffffffffff\r\nx\r\n0\r\n\r\n",
		"chunk size bare LF":    "POST /upload HTTP/1.1\r\nHost: " + host + "\r\nTransfer-Encoding: chunked\r\n\r\n5\nhello\r\n0\r\n\r\n",
		"HTTP/1.0 without Host": "GET / HTTP/1.0\r\n\r\n",
		"two Content-Lengths":   "POST /upload HTTP/1.1\r\nHost: " + host + "\r\nContent-Length: 3\r\nContent-Length: 5\r\n\r\nhello",
	}
	for name, raw := range cases {
		t.Run(name, func(t *testing.T) {
			c, br := rawTLS(t, r, ew.exact)
			go io.WriteString(c, raw)
			expectCleanEnd(t, c, br, name)
		})
	}
	stillServes(t, r, ew)
}

// TestRequestSmuggling sends a body that both Content-Length and chunked
// framing describe, hiding a DELETE after the chunked end. Whatever the
// framing, the DELETE must never reach the upstream unchecked: it is
// refused by the rules or rejected as malformed.
func TestRequestSmuggling(t *testing.T) {
	ew := newExactWorld(t)
	r := ew.rig(t, "deny web exact.example.test DELETE\ndefault allow\n")
	host := fmt.Sprintf("exact.example.test:%d", ew.exact.addr.Port())
	smuggled := "DELETE /smuggled HTTP/1.1\r\nHost: " + host + "\r\n\r\n"
	body := "0\r\n\r\n" + smuggled
	for _, te := range []string{"chunked", " chunked", "chunked, identity", "xchunked"} {
		c, br := rawTLS(t, r, ew.exact)
		fmt.Fprintf(c, "POST /upload HTTP/1.1\r\nHost: %s\r\nContent-Length: %d\r\nTransfer-Encoding: %s\r\n\r\n%s", host, len(body), te, body)
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		for {
			resp, err := http.ReadResponse(br, nil)
			if err != nil {
				break
			}
			resp.Body.Close()
		}
		c.Close()
	}
	if _, ok := ew.seen.Load("DELETE /smuggled"); ok {
		t.Fatal("a smuggled DELETE reached the upstream")
	}
	stillServes(t, r, ew)
}

func netAddrPort(ip string, port uint16) netip.AddrPort {
	return netip.AddrPortFrom(netip.MustParseAddr(ip), port)
}

// TestSlowlorisIsCutOff: a client that trickles its ClientHello or its
// headers is closed at the header timeout, and others are served meanwhile.
func TestSlowlorisIsCutOff(t *testing.T) {
	ew := newExactWorld(t)
	r := startRig(t, rigOptions{rules: "allow any 127.0.0.0/8\ndefault allow\n", hosts: ew.hosts, names: ew.names, upstreamCAs: ew.pki.Pool, headerWait: 300 * time.Millisecond})
	r.divert(ew.exact.addr)
	slowHello, _ := net.Dial("tcp", r.transparent)
	defer slowHello.Close()
	slowHello.Write([]byte{0x16, 0x03, 0x01})
	c, br := rawTLS(t, r, ew.exact)
	fmt.Fprintf(c, "GET / HTTP/1.1\r\nHost: exact.example.test\r\nX-Slow: ")
	start := time.Now()
	for _, conn := range []net.Conn{slowHello, c} {
		conn.SetReadDeadline(time.Now().Add(10 * time.Second))
		var err error
		if conn == c {
			_, err = http.ReadResponse(br, nil)
		} else {
			_, err = conn.Read(make([]byte, 1))
		}
		if ne, ok := err.(net.Error); ok && ne.Timeout() {
			t.Fatal("a slow client was never cut off")
		}
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("cut off after %v", d)
	}
	stillServes(t, r, ew)
}
