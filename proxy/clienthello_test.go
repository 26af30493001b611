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

// helloWithExtensions builds a minimal TLS 1.3 ClientHello record for sni,
// with extra extensions (type, data) appended.
func helloWithExtensions(sni string, extra ...[2][]byte) []byte {
	u16 := func(n int) []byte { return []byte{byte(n >> 8), byte(n)} }
	ext := func(typ int, data []byte) []byte { return append(append(u16(typ), u16(len(data))...), data...) }
	name := append([]byte{0}, append(u16(len(sni)), sni...)...)
	var exts []byte
	exts = append(exts, ext(0, append(u16(len(name)), name...))...)                               // server_name
	exts = append(exts, ext(0x2b, []byte{2, 0x03, 0x04})...)                                      // supported_versions: TLS 1.3
	exts = append(exts, ext(0x0a, []byte{0, 2, 0, 0x1d})...)                                      // supported_groups: x25519
	exts = append(exts, ext(0x0d, []byte{0, 2, 0x08, 0x04})...)                                   // signature_algorithms
	exts = append(exts, ext(0x33, append([]byte{0, 36, 0, 0x1d, 0, 32}, make([]byte, 32)...))...) // key_share
	for _, e := range extra {
		exts = append(exts, ext(int(e[0][0])<<8|int(e[0][1]), e[1])...)
	}
	body := append([]byte{3, 3}, make([]byte, 32)...) // legacy version, random
	body = append(body, 0)                            // session id
	body = append(body, 0, 2, 0x13, 0x01)             // cipher suites
	body = append(body, 1, 0)                         // compression
	body = append(body, u16(len(exts))...)
	body = append(body, exts...)
	hs := append([]byte{1, 0, byte(len(body) >> 8), byte(len(body))}, body...)
	return append([]byte{0x16, 3, 1, byte(len(hs) >> 8), byte(len(hs))}, hs...)
}

// TestECHIsSeen: a hello carrying encrypted_client_hello is marked, so
// that it is never spliced undecrypted to a server name nobody decided.
func TestECHIsSeen(t *testing.T) {
	plain, _, err := readClientHello(bytes.NewReader(helloWithExtensions("public.example.test")))
	if err != nil || plain.ECH || plain.ServerName != "public.example.test" {
		t.Fatalf("plain hello: %+v %v", plain, err)
	}
	ech, _, err := readClientHello(bytes.NewReader(helloWithExtensions("public.example.test", [2][]byte{{0xfe, 0x0d}, {0, 0, 1, 0, 1, 5, 0, 1, 0xaa, 0, 1, 0xbb}})))
	if err != nil || !ech.ECH {
		t.Fatalf("ECH hello: %+v %v", ech, err)
	}
}
