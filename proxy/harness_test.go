package proxy

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"io"
	"log"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"guard/audit"
	"guard/firewall"
	"guard/internal/testpki"
	"guard/rules"
)

// upstream is a TLS test server bound to its own loopback address, so that
// the test's "DNS" can tell hosts apart by address.
type upstream struct {
	srv  *httptest.Server
	addr netip.AddrPort
	name string
}

func startUpstream(t testing.TB, pki *testpki.CA, ip, name string, h http.Handler, configure ...func(*http.Server)) *upstream {
	t.Helper()
	ln, err := net.Listen("tcp", ip+":0")
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(h)
	srv.Listener.Close()
	srv.Listener = ln
	srv.EnableHTTP2 = true
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{pki.ServerCert(t, name, ip)}}
	srv.Config.ErrorLog = log.New(io.Discard, "", 0)
	for _, f := range configure {
		f(srv.Config)
	}
	srv.StartTLS()
	t.Cleanup(srv.Close)
	return &upstream{srv: srv, addr: netip.MustParseAddrPort(ln.Addr().String()), name: name}
}

// memEvents keeps events in memory; fail makes Emit fail.
type memEvents struct {
	mu   sync.Mutex
	evs  []audit.Event
	fail bool
}

func (m *memEvents) Emit(_ context.Context, e audit.Event) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.fail {
		return io.ErrShortWrite
	}
	m.evs = append(m.evs, e)
	return nil
}

func (m *memEvents) all() []audit.Event {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]audit.Event(nil), m.evs...)
}

// staticNames is a snoop table stand-in.
type staticNames map[netip.Addr][]string

func (s staticNames) Names(ip netip.Addr) []string { return s[ip] }

// rig is a running proxy with its explicit and transparent listeners.
type rig struct {
	p           *Proxy
	ca          *Authority
	caPool      *x509.CertPool
	caFile      string
	events      *memEvents
	explicit    string // host:port of the explicit proxy
	transparent string // host:port that feeds ServeTransparent
	// dst maps a transparent listener connection to the destination the
	// "VM" dialled; set it before connecting.
	mu  sync.Mutex
	dst netip.AddrPort
}

type rigOptions struct {
	rules       string
	hosts       map[string]string
	names       staticNames
	noMitm      []string
	upstreamCAs *x509.CertPool
	headerWait  time.Duration
	credentials Credentials
}

func startRig(t testing.TB, o rigOptions) *rig {
	t.Helper()
	dir := t.TempDir()
	ca, err := LoadOrCreateCA(dir, "test", 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	pol, err := rules.ParseString(o.rules)
	if err != nil {
		t.Fatal(err)
	}
	ev := &memEvents{}
	cfg := Config{
		CA: ca, Policy: firewall.NewActive(firewall.Compile(pol)), Events: ev,
		UpstreamRoots: o.upstreamCAs, StaticHosts: o.hosts, NoMitm: o.noMitm,
		Logger: testLogger(), ReadHeaderTimeout: o.headerWait, Credentials: o.credentials,
	}
	if o.names != nil {
		cfg.Snoop = o.names
	}
	p, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := &rig{p: p, ca: ca, events: ev}
	r.caPool = x509.NewCertPool()
	r.caPool.AddCert(ca.Certificate())
	r.caFile = filepath.Join(dir, "guard-ca.pem")
	os.WriteFile(r.caFile, ca.CertificatePEM(), 0o600)

	var wg sync.WaitGroup
	wg.Go(func() { p.Run(ctx) })
	eln, _ := net.Listen("tcp", "127.0.0.1:0")
	r.explicit = eln.Addr().String()
	wg.Go(func() { p.ServeExplicit(ctx, eln) })
	tln, _ := net.Listen("tcp", "127.0.0.1:0")
	r.transparent = tln.Addr().String()
	wg.Go(func() {
		for {
			c, err := tln.Accept()
			if err != nil {
				return
			}
			r.mu.Lock()
			dst := r.dst
			r.mu.Unlock()
			go p.ServeTransparent(ctx, c, dst)
		}
	})
	t.Cleanup(func() {
		cancel()
		tln.Close()
		wg.Wait()
	})
	return r
}

func (r *rig) divert(dst netip.AddrPort) {
	r.mu.Lock()
	r.dst = dst
	r.mu.Unlock()
}

// transparentClient is an HTTP client whose every connection lands on the
// transparent entry with dst as the original destination, trusting guard's
// CA, as a VM would.
func (r *rig) transparentClient(dst netip.AddrPort, h2 bool) *http.Client {
	r.divert(dst)
	tr := &http.Transport{
		Proxy: nil,
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "tcp", r.transparent)
		},
		TLSClientConfig:   &tls.Config{RootCAs: r.caPool},
		ForceAttemptHTTP2: h2,
	}
	if !h2 {
		tr.TLSNextProto = map[string]func(string, *tls.Conn) http.RoundTripper{}
	}
	return &http.Client{Transport: tr, Timeout: 30 * time.Second}
}

// testLogger discards, or prints with GUARD_TEST_LOG set.
func testLogger() *slog.Logger {
	if os.Getenv("GUARD_TEST_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.NewTextHandler(io.Discard, &slog.HandlerOptions{Level: slog.LevelWarn}))
}
