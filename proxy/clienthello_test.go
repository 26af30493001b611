package proxy

import (
	"bytes"
	"crypto/tls"
	"net"
	"testing"
	"time"
)

// captureHello returns the bytes a real crypto/tls client sends first.
func captureHello(t testing.TB, cfg *tls.Config) []byte {
	t.Helper()
	client, server := net.Pipe()
	defer server.Close()
	go func() {
		tls.Client(client, cfg).Handshake()
		client.Close()
	}()
	server.SetReadDeadline(time.Now().Add(5 * time.Second))
	// crypto/tls writes the whole ClientHello in one Write, and net.Pipe
	// hands a Write to one Read when the buffer is large enough.
	b := make([]byte, 64<<10)
	n, err := server.Read(b)
	if err != nil {
		t.Fatal(err)
	}
	return b[:n]
}

// segmentedReader returns at most n bytes a read, as TCP segments would.
type segmentedReader struct {
	b []byte
	n int
}

func (r *segmentedReader) Read(p []byte) (int, error) {
	if len(r.b) == 0 {
		return 0, net.ErrClosed
	}
	k := min(len(p), r.n, len(r.b))
	copy(p, r.b[:k])
	r.b = r.b[k:]
	return k, nil
}

func TestReadClientHello(t *testing.T) {
	hello := captureHello(t, &tls.Config{ServerName: "api.example.com", NextProtos: []string{"h2", "http/1.1"},
		CurvePreferences: []tls.CurveID{tls.X25519MLKEM768, tls.X25519}})
	if len(hello) < 1500 {
		t.Fatalf("ClientHello with a post-quantum key share is %d bytes; expected over 1.5 KB", len(hello))
	}
	for _, seg := range []int{1, 7, 536, 1460, 65536} {
		h, raw, err := readClientHello(&segmentedReader{b: append([]byte(nil), hello...), n: seg})
		if err != nil {
			t.Fatalf("segments of %d: %v", seg, err)
		}
		if h.ServerName != "api.example.com" || len(h.ALPN) != 2 || h.ALPN[0] != "h2" {
			t.Fatalf("segments of %d: %+v", seg, h)
		}
		if !bytes.Equal(raw, hello) {
			t.Fatalf("segments of %d: replay bytes differ (%d vs %d)", seg, len(raw), len(hello))
		}
	}
	// A client connecting by IP sends no SNI.
	noSNI := captureHello(t, &tls.Config{ServerName: "192.0.2.1"})
	h, _, err := readClientHello(bytes.NewReader(noSNI))
	if err != nil || h.ServerName != "" {
		t.Fatalf("no SNI: %+v %v", h, err)
	}
}

// FuzzReadClientHello: the reader never panics or reads past its bound,
// and what it accepts it returns whole for replay.
func FuzzReadClientHello(f *testing.F) {
	f.Add(captureHello(f, &tls.Config{ServerName: "a.example", NextProtos: []string{"h2"}}))
	f.Add(captureHello(f, &tls.Config{ServerName: "192.0.2.1"}))
	f.Add([]byte("GET / HTTP/1.1\r\n\r\n"))
	f.Add([]byte{0x16, 0x03, 0x01, 0x00, 0x05, 0x01, 0x00, 0x00, 0x01, 0x00})
	f.Fuzz(func(t *testing.T, in []byte) {
		h, raw, err := readClientHello(bytes.NewReader(in))
		if len(raw) > maxClientHelloBytes || !bytes.HasPrefix(in, raw) {
			t.Fatalf("read %d bytes, not a prefix of the input", len(raw))
		}
		if err == nil && h == nil {
			t.Fatal("no hello and no error")
		}
	})
}

func TestReadClientHelloRejectsGarbage(t *testing.T) {
	for name, in := range map[string][]byte{
		"http":       []byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n"),
		"empty":      nil,
		"truncated":  {0x16, 0x03, 0x01, 0x02, 0x00, 0x01, 0x00},
		"bad length": {0x16, 0x03, 0x01, 0xff, 0xff, 0x01, 0x00, 0xff, 0xfb},
	} {
		if _, _, err := readClientHello(bytes.NewReader(in)); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}
