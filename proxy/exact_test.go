package proxy

import (
	"bufio"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coder/websocket"
)

// exactHandler serves the framing cases.
func exactHandler(conns *atomic.Int32, seen *sync.Map) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/head", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", "12345")
		if r.Method != http.MethodHead {
			w.Write(make([]byte, 12345))
		}
	})
	mux.HandleFunc("/204", func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(204) })
	mux.HandleFunc("/304", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("ETag", `"x"`)
		w.WriteHeader(304)
	})
	mux.HandleFunc("/trailer", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Trailer", "X-Sum")
		w.Write([]byte("part one,"))
		w.(http.Flusher).Flush()
		w.Write([]byte("part two"))
		w.Header().Set("X-Sum", "42")
	})
	mux.HandleFunc("/upload", func(w http.ResponseWriter, r *http.Request) {
		n, _ := io.Copy(io.Discard, r.Body)
		fmt.Fprintf(w, "cl=%d te=%v got=%d trailer=%s", r.ContentLength, r.TransferEncoding, n, r.Trailer.Get("X-Check"))
	})
	mux.HandleFunc("/download", func(w http.ResponseWriter, r *http.Request) {
		var n int64
		fmt.Sscan(r.URL.Query().Get("n"), &n)
		w.Header().Set("Content-Length", fmt.Sprint(n))
		io.CopyN(w, zeros{}, n)
	})
	mux.HandleFunc("/ws", func(w http.ResponseWriter, r *http.Request) {
		c, err := websocket.Accept(w, r, nil)
		if err != nil {
			return
		}
		defer c.CloseNow()
		for {
			typ, msg, err := c.Read(r.Context())
			if err != nil {
				return
			}
			c.Write(r.Context(), typ, append([]byte("echo: "), msg...))
		}
	})
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		if seen != nil {
			seen.Store(r.Method+" "+r.URL.Path, true)
		}
		fmt.Fprintf(w, "%s %s", r.Method, r.URL.Path)
	})
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { mux.ServeHTTP(w, r) })
}

type zeros struct{}

func (zeros) Read(p []byte) (int, error) { clear(p); return len(p), nil }

type exactWorld struct {
	*world
	exact *upstream
	conns atomic.Int32
	seen  sync.Map
}

func newExactWorld(t testing.TB) *exactWorld {
	ew := &exactWorld{world: newWorld(t)}
	ew.exact = startUpstream(t, ew.pki, "127.0.0.6", "exact.example.test", exactHandler(&ew.conns, &ew.seen), func(s *http.Server) {
		s.ConnState = func(c net.Conn, s http.ConnState) {
			if s == http.StateNew {
				ew.conns.Add(1)
			}
		}
	})
	ew.hosts["exact.example.test"] = "127.0.0.6"
	ew.names[netip.MustParseAddr("127.0.0.6")] = []string{"exact.example.test"}
	return ew
}

// rawTLS opens a TLS connection to the transparent entry, as a VM client
// would, for writing requests byte by byte.
func rawTLS(t *testing.T, r *rig, up *upstream) (*tls.Conn, *bufio.Reader) {
	t.Helper()
	r.divert(up.addr)
	c, err := tls.Dial("tcp", r.transparent, &tls.Config{ServerName: up.name, RootCAs: r.caPool, NextProtos: []string{"http/1.1"}})
	if err != nil {
		t.Fatal(err)
	}
	c.SetDeadline(time.Now().Add(20 * time.Second))
	t.Cleanup(func() { c.Close() })
	return c, bufio.NewReader(c)
}

func TestBodilessResponsesAndKeepAlive(t *testing.T) {
	ew := newExactWorld(t)
	r := ew.rig(t, "allow any 127.0.0.0/8\ndefault allow\n")
	c, br := rawTLS(t, r, ew.exact)
	host := fmt.Sprintf("exact.example.test:%d", ew.exact.addr.Port())
	// Four requests on one connection: a leaked body or a chunk terminator
	// on a bodiless response would corrupt the next one.
	for _, path := range []string{"/204", "/304", "/head", "/end"} {
		method := "GET"
		if path == "/head" {
			method = "HEAD"
		}
		fmt.Fprintf(c, "%s %s HTTP/1.1\r\nHost: %s\r\n\r\n", method, path, host)
		req, _ := http.NewRequest(method, "/", nil)
		resp, err := http.ReadResponse(br, req)
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		switch path {
		case "/204", "/304":
			if len(body) != 0 || resp.TransferEncoding != nil {
				t.Errorf("%s: body %q, TE %v", path, body, resp.TransferEncoding)
			}
		case "/head":
			if resp.ContentLength != 12345 || len(body) != 0 {
				t.Errorf("HEAD: Content-Length %d, body %d", resp.ContentLength, len(body))
			}
		case "/end":
			if string(body) != "GET /end" {
				t.Errorf("after bodiless responses: %q", body)
			}
		}
	}
	if n := ew.conns.Load(); n != 1 {
		t.Errorf("upstream saw %d connections for four keep-alive requests", n)
	}
}

func TestChunkedTrailersAndContentLength(t *testing.T) {
	ew := newExactWorld(t)
	r := ew.rig(t, "allow any 127.0.0.0/8\ndefault allow\n")
	c := r.transparentClient(ew.exact.addr, false)
	resp, err := c.Get(url(ew.exact, "/trailer"))
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if string(body) != "part one,part two" || resp.Trailer.Get("X-Sum") != "42" {
		t.Fatalf("body %q trailer %v", body, resp.Trailer)
	}
	// A request with Content-Length reaches upstream with it; a chunked one
	// stays chunked with its trailer.
	resp, _ = c.Post(url(ew.exact, "/upload"), "text/plain", strings.NewReader("0123456789"))
	body, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	if string(body) != "cl=10 te=[] got=10 trailer=" {
		t.Fatalf("content-length upload: %s", body)
	}
	req, _ := http.NewRequest("POST", url(ew.exact, "/upload"), io.MultiReader(strings.NewReader("abc"), strings.NewReader("def")))
	req.ContentLength = -1
	req.Trailer = http.Header{"X-Check": {"ok"}}
	resp, err = c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	// Upstream speaks HTTP/2 here, where a body of unknown length has no
	// transfer coding; the length stays unknown and the trailer arrives.
	if string(body) != "cl=-1 te=[] got=6 trailer=ok" {
		t.Fatalf("chunked upload: %s", body)
	}
}

func TestExpectContinue(t *testing.T) {
	ew := newExactWorld(t)
	r := ew.rig(t, "deny web exact.example.test PUT\ndefault allow\n")
	r.divert(ew.exact.addr)
	connectTo := fmt.Sprintf("exact.example.test:%d:%s", ew.exact.addr.Port(), r.transparent)
	body := filepath.Join(t.TempDir(), "body")
	os.WriteFile(body, []byte(strings.Repeat("x", 2<<20)), 0o600)
	out, err := curl(t, "--http1.1", "--cacert", r.caFile, "--connect-to", connectTo, "-H", "Expect: 100-continue", "--data-binary", "@"+body, url(ew.exact, "/upload"))
	if err != nil || out != "cl=2097152 te=[] got=2097152 trailer=" {
		t.Fatalf("%v %s", err, out)
	}
	// A blocked request gets its 403 without the client sending the body.
	out, err = curl(t, "-v", "--http1.1", "--cacert", r.caFile, "--connect-to", connectTo, "-X", "PUT", "-H", "Expect: 100-continue", "--data-binary", "@"+body, url(ew.exact, "/upload"))
	if !strings.Contains(out, "< HTTP/1.1 403") || strings.Contains(out, "HTTP/1.1 100") {
		t.Fatalf("%v %s", err, out)
	}
}

func TestWebSocketEcho(t *testing.T) {
	ew := newExactWorld(t)
	r := ew.rig(t, "allow web exact.example.test GET,WEBSOCKET\ndefault deny\n")
	c := r.transparentClient(ew.exact.addr, false)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	ws, _, err := websocket.Dial(ctx, strings.Replace(url(ew.exact, "/ws"), "https", "wss", 1), &websocket.DialOptions{HTTPClient: c})
	if err != nil {
		t.Fatal(err)
	}
	defer ws.CloseNow()
	for i := range 3 {
		msg := fmt.Sprintf("hello %d", i)
		if err := ws.Write(ctx, websocket.MessageText, []byte(msg)); err != nil {
			t.Fatal(err)
		}
		_, got, err := ws.Read(ctx)
		if err != nil || string(got) != "echo: "+msg {
			t.Fatalf("%q %v", got, err)
		}
	}
	ws.Close(websocket.StatusNormalClosure, "")
}

// TestStreamingMemoryIsFlat moves 200 MB each way through the proxy and
// checks that the heap stays far below that: bodies stream, nothing is
// buffered whole.
func TestStreamingMemoryIsFlat(t *testing.T) {
	ew := newExactWorld(t)
	r := ew.rig(t, "allow any 127.0.0.0/8\ndefault allow\n")
	c := r.transparentClient(ew.exact.addr, false)
	const size = 200 << 20
	var peak atomic.Uint64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		var ms runtime.MemStats
		for {
			select {
			case <-stop:
				return
			case <-time.After(20 * time.Millisecond):
			}
			runtime.ReadMemStats(&ms)
			if ms.HeapInuse > peak.Load() {
				peak.Store(ms.HeapInuse)
			}
		}
	})
	resp, err := c.Post(url(ew.exact, "/upload"), "application/octet-stream", io.LimitReader(zeros{}, size))
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if string(body) != fmt.Sprintf("cl=-1 te=[] got=%d trailer=", size) {
		t.Fatalf("upload: %s", body)
	}
	resp, err = c.Get(url(ew.exact, fmt.Sprintf("/download?n=%d", size)))
	if err != nil {
		t.Fatal(err)
	}
	n, err := io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	close(stop)
	wg.Wait()
	if err != nil || n != size || resp.ContentLength != size {
		t.Fatalf("download: %d of %d (Content-Length %d): %v", n, size, resp.ContentLength, err)
	}
	if p := peak.Load(); p > 64<<20 {
		t.Fatalf("heap peaked at %d MiB while streaming 200 MiB each way", p>>20)
	}
	t.Logf("heap peak %d MiB", peak.Load()>>20)
}

// TestTLSWithoutSNI: a client that connects by address sends no server
// name. Deliberate choice: intercept with a leaf for the address, require
// Host to be that address, and verify the upstream against it.
func TestTLSWithoutSNI(t *testing.T) {
	ew := newExactWorld(t)
	r := ew.rig(t, "allow tcp 127.0.0.6\ndefault deny\n")
	c := r.transparentClient(ew.exact.addr, false)
	resp, err := c.Get(fmt.Sprintf("https://%s/by-address", ew.exact.addr))
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || string(body) != "GET /by-address" {
		t.Fatalf("%d %s", resp.StatusCode, body)
	}
	if got := resp.TLS.PeerCertificates[0].IPAddresses; len(got) != 1 || !got[0].Equal(net.ParseIP("127.0.0.6")) {
		t.Fatalf("leaf SAN %v", got)
	}
	req, _ := http.NewRequest("GET", fmt.Sprintf("https://%s/", ew.exact.addr), nil)
	req.Host = "exact.example.test"
	resp, err = c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 403 {
		t.Fatalf("Host name on a connection without SNI: %d", resp.StatusCode)
	}
}

// TestUpgradesAreTheirOwnOperation: after a 101 the method rules see
// nothing, so a WebSocket handshake is decided as WEBSOCKET (read-only
// leaves it out), and upgrades to anything else are refused.
func TestUpgradesAreTheirOwnOperation(t *testing.T) {
	ew := newExactWorld(t)
	r := ew.rig(t, "allow web exact.example.test read-only\ndefault deny\n")
	c := r.transparentClient(ew.exact.addr, false)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	_, resp, err := websocket.Dial(ctx, strings.Replace(url(ew.exact, "/ws"), "https", "wss", 1), &websocket.DialOptions{HTTPClient: c})
	if err == nil || resp == nil || resp.StatusCode != 403 {
		t.Fatalf("WebSocket under read-only: %v %v", resp, err)
	}
	req, _ := http.NewRequest("GET", url(ew.exact, "/"), nil)
	req.Header.Set("Connection", "Upgrade")
	req.Header.Set("Upgrade", "h2c")
	r2 := ew.rig(t, "allow any 127.0.0.0/8\ndefault allow\n")
	resp, err = r2.transparentClient(ew.exact.addr, false).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 403 || !strings.Contains(string(body), `upgrade to \"h2c\"`) {
		t.Fatalf("h2c upgrade: %d %s", resp.StatusCode, body)
	}
}
