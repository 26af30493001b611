package proxy

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/elazarl/goproxy"
	"golang.org/x/net/http2"

	"guard/audit"
	"guard/firewall"
	"guard/internal/hostaddr"
	"guard/internal/relay"
	"guard/rules"
)

// Policy gives the matcher in force; *firewall.Active satisfies it.
type Policy interface {
	Load() *firewall.Matcher
}

// EventSink records events; *audit.Log satisfies it. An error means the
// event is not on record, and the decision it describes becomes a deny.
type EventSink interface {
	Emit(ctx context.Context, e audit.Event) error
}

// Names gives the names the VM resolved for an address; *firewall.SnoopTable
// satisfies it.
type Names interface {
	Names(ip netip.Addr) []string
}

// HostAddrs tells the host's own addresses; *hostaddr.Set satisfies it.
type HostAddrs interface {
	Contains(a netip.Addr) bool
}

// Resolver looks up the addresses of a host for the explicit proxy.
type Resolver interface {
	LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error)
}

// Config assembles a Proxy.
type Config struct {
	CA     *Authority
	Policy Policy
	Events EventSink
	// Snoop gives the DNS names of a transparent flow's destination; nil
	// when there is no network stack.
	Snoop Names
	// UpstreamRoots verifies upstream servers: the system roots plus the
	// profile's upstreamCAs.
	UpstreamRoots *x509.CertPool
	// StaticHosts are the profile's dns.hosts, used before Resolver.
	StaticHosts map[string]string
	Resolver    Resolver
	// HostAddrs are the host's own addresses, which are dialled only for a
	// rule that names them; the interfaces' addresses when nil.
	HostAddrs HostAddrs
	// NoMitm are the profile's noMitmDomains, added to the built-in
	// pass-through list.
	NoMitm []string
	// Guardrails and Credentials are the later layers' hooks; nil means
	// allow and inject nothing.
	Guardrails  Guardrails
	Credentials Credentials
	Renderer    Renderer
	Logger      *slog.Logger
	// ReadHeaderTimeout bounds how long a client may take to send request
	// headers, and the ClientHello (default 10 s): slowloris protection.
	ReadHeaderTimeout time.Duration
}

// BuiltinPassThrough are spliced without decryption (domain and
// subdomains) unless a web rule forces interception: their clients pin
// certificates.
func BuiltinPassThrough() []string { return []string{"google.com", "gstatic.com", "googleapis.com"} }

// Timeouts and limits.
const (
	defaultReadHeaderTimeout = 10 * time.Second
	idleTimeout              = 120 * time.Second
	maxHeaderBytes           = 64 << 10
	dialTimeout              = 10 * time.Second
)

// Proxy intercepts HTTP(S). Create it with New, start it with Run, and hand
// it connections with ServeTransparent or through the explicit listener.
type Proxy struct {
	cfg         Config
	logger      *slog.Logger
	passThrough []string

	intercepted *http.Server // serves every decrypted or plain client conn
	listener    *connListener
	upstream    *upstreamPools
	forward     *httputil.ReverseProxy
	connect     *goproxy.ProxyHttpServer

	infos sync.Map // net.Conn -> *connInfo, for ConnContext
}

// New builds a proxy. Nothing runs until Run.
func New(cfg Config) (*Proxy, error) {
	if cfg.CA == nil || cfg.Policy == nil || cfg.Events == nil {
		return nil, errors.New("proxy: CA, Policy and Events are required")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.ReadHeaderTimeout <= 0 {
		cfg.ReadHeaderTimeout = defaultReadHeaderTimeout
	}
	if cfg.Resolver == nil {
		cfg.Resolver = net.DefaultResolver
	}
	if cfg.HostAddrs == nil {
		cfg.HostAddrs = &hostaddr.Set{}
	}
	if cfg.Guardrails == nil {
		cfg.Guardrails = allowAll{}
	}
	if cfg.Credentials == nil {
		cfg.Credentials = injectNothing{}
	}
	if cfg.Renderer == nil {
		cfg.Renderer = JSONRenderer{}
	}
	if cfg.UpstreamRoots == nil {
		roots, err := x509.SystemCertPool()
		if err != nil {
			return nil, fmt.Errorf("proxy: system roots: %w", err)
		}
		cfg.UpstreamRoots = roots
	}
	p := &Proxy{cfg: cfg, logger: cfg.Logger, listener: newConnListener()}
	for _, d := range append(BuiltinPassThrough(), cfg.NoMitm...) {
		if h, err := rules.NormalizeHost(d); err == nil {
			p.passThrough = append(p.passThrough, h)
		}
	}
	p.upstream = &upstreamPools{byDst: map[netip.Addr]*http.Transport{}, make: p.newTransport}
	p.forward = &httputil.ReverseProxy{
		Rewrite:   p.rewrite,
		Transport: p.upstream,
		ModifyResponse: func(resp *http.Response) error {
			if t, ok := targetFrom(resp.Request.Context()); ok && t.scrub != nil {
				t.scrub.Response(resp)
			}
			return nil
		},
		ErrorHandler: p.upstreamError,
		ErrorLog:     slog.NewLogLogger(cfg.Logger.Handler(), slog.LevelDebug),
	}
	p.intercepted = &http.Server{
		Handler:           http.HandlerFunc(p.serveRequest),
		ReadHeaderTimeout: cfg.ReadHeaderTimeout,
		IdleTimeout:       idleTimeout,
		MaxHeaderBytes:    maxHeaderBytes,
		ErrorLog:          slog.NewLogLogger(cfg.Logger.Handler(), slog.LevelDebug),
		ConnContext: func(ctx context.Context, c net.Conn) context.Context {
			if info, ok := p.infos.Load(c); ok {
				return withConnInfo(ctx, info.(*connInfo))
			}
			return ctx
		},
		ConnState: func(c net.Conn, s http.ConnState) {
			if s == http.StateClosed || s == http.StateHijacked {
				p.infos.Delete(c)
			}
		},
	}
	h2 := &http2.Server{IdleTimeout: idleTimeout, MaxReadFrameSize: 1 << 20}
	if err := http2.ConfigureServer(p.intercepted, h2); err != nil {
		return nil, fmt.Errorf("proxy: http2: %w", err)
	}
	p.connect = p.newConnectFront()
	return p, nil
}

// Run serves intercepted connections until ctx ends. ServeTransparent and
// the explicit listener need it running.
func (p *Proxy) Run(ctx context.Context) error {
	errc := make(chan error, 1)
	go func() { errc <- p.intercepted.Serve(p.listener) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	shutdown, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	p.intercepted.Shutdown(shutdown)
	p.intercepted.Close()
	p.upstream.reset()
	<-errc
	return nil
}

// PolicyChanged retires every upstream connection: their destinations were
// checked against the old policy when they were dialled.
func (p *Proxy) PolicyChanged() { p.upstream.reset() }

// connInfo is what is known about one client connection.
type connInfo struct {
	// dst is the original destination of a transparent connection; for the
	// explicit proxy it is set only when the CONNECT target is an address.
	dst         netip.Addr
	port        uint16
	transparent bool
	// spliceOnly: transparent interception is off; TLS is decided by its
	// server name and spliced, never decrypted, unless a web rule asks.
	spliceOnly bool
	// connectHost is the explicit CONNECT target's host, normalized.
	connectHost string
	// l4Names are the DNS names the VM resolved for dst.
	l4Names []string
	tls     bool
	sni     string // normalized; empty when the client sent none
	verdict firewall.Verdict
}

type connInfoKey struct{}

func withConnInfo(ctx context.Context, ci *connInfo) context.Context {
	return context.WithValue(ctx, connInfoKey{}, ci)
}

func connInfoFrom(ctx context.Context) *connInfo {
	ci, _ := ctx.Value(connInfoKey{}).(*connInfo)
	return ci
}

// ServeTransparent takes a connection the network stack diverted from the
// VM, with the destination the VM dialled. It returns once the connection
// is handed on; the connection is closed when done.
func (p *Proxy) ServeTransparent(ctx context.Context, conn net.Conn, originalDst netip.AddrPort) {
	p.serveConn(ctx, conn, p.transparentInfo(originalDst))
}

// ServeSpliced takes a diverted TLS connection when transparent
// interception is off (the profile's transparentInterception false): the
// ClientHello's server name is still decided at layer sni, and the
// connection is spliced to the address the VM dialled without decryption.
// A server name that is not one the VM resolved for that address is
// refused, since nothing after the handshake can be checked. A web rule
// that matches still forces interception.
func (p *Proxy) ServeSpliced(ctx context.Context, conn net.Conn, originalDst netip.AddrPort) {
	ci := p.transparentInfo(originalDst)
	ci.spliceOnly = true
	p.serveConn(ctx, conn, ci)
}

func (p *Proxy) transparentInfo(originalDst netip.AddrPort) *connInfo {
	dst := firewall.CanonicalIP(originalDst.Addr())
	ci := &connInfo{dst: dst, port: originalDst.Port(), transparent: true}
	if p.cfg.Snoop != nil {
		ci.l4Names = p.cfg.Snoop.Names(dst)
	}
	// The network stack decided this flow at L4; the proxy starts from the
	// same verdict so that later layers can only tighten it.
	ci.verdict = p.cfg.Policy.Load().Verdict(firewall.Flow{Proto: firewall.TCP, IP: dst, Names: ci.l4Names, Port: ci.port})
	return ci
}

// serveConn runs the front of one client connection: TLS or not, SNI
// decision, pass-through or interception.
func (p *Proxy) serveConn(ctx context.Context, conn net.Conn, ci *connInfo) {
	if ci.verdict.Action == firewall.Deny {
		// The network stack records L4 denials; this one is a race with a
		// policy change, or a caller that did not ask first.
		p.logger.DebugContext(ctx, "front: connection denied at L4", "ip", ci.dst, "port", ci.port, "rule", ci.verdict.Rule.String())
		conn.Close()
		return
	}
	conn.SetReadDeadline(time.Now().Add(p.cfg.ReadHeaderTimeout))
	br := bufio.NewReaderSize(conn, 4096)
	first, err := br.Peek(1)
	if err != nil {
		conn.Close()
		return
	}
	rc := &replayConn{Conn: conn}
	if first[0] != 0x16 { // not a TLS handshake record
		if (ci.port == 443 || ci.spliceOnly) && ci.transparent {
			// Deliberate: on 443 only TLS passes. Plain bytes there are
			// either a confused client or a tunnel trying to look like TLS.
			p.recordDeny(ctx, ci, audit.LayerSNI, "non-TLS bytes on port 443")
			conn.Close()
			return
		}
		rc.pending = drain(br)
		conn.SetReadDeadline(time.Time{})
		p.handOff(rc, ci)
		return
	}
	hello, raw, err := readClientHello(br)
	if err != nil {
		p.logger.DebugContext(ctx, "front: bad ClientHello", "err", err)
		p.recordDeny(ctx, ci, audit.LayerSNI, "malformed TLS ClientHello")
		conn.Close()
		return
	}
	rc.pending = append(raw, drain(br)...)
	ci.tls = true
	if v, ok := p.decideSNI(ctx, ci, hello.ServerName); !ok {
		conn.Close()
		return
	} else {
		ci.verdict = v
	}
	if named, ok := conn.(interface{ SetServerName(string) }); ok && ci.sni != "" {
		named.SetServerName(ci.sni) // the network stack decides the flow by it too after a policy change
	}
	splice := ci.verdict.Action == firewall.Allow && (ci.spliceOnly || (ci.sni != "" && p.isPassThrough(ci.sni) && p.sniFitsDestination(ci)))
	if splice && hello.ECH {
		// A spliced ECH hello would reach a server name nobody decided.
		p.recordDeny(ctx, ci, audit.LayerSNI, "TLS Encrypted Client Hello on a connection that would be spliced undecrypted")
		conn.Close()
		return
	}
	conn.SetReadDeadline(time.Time{})
	if splice {
		p.splice(ctx, rc, ci)
		return
	}
	tlsConn := tls.Server(rc, p.tlsConfig(ci))
	p.handOff(tlsConn, ci)
}

// drain returns what a bufio.Reader holds without reading further.
func drain(br *bufio.Reader) []byte {
	b, _ := br.Peek(br.Buffered())
	return append([]byte(nil), b...)
}

func (p *Proxy) handOff(c net.Conn, ci *connInfo) {
	p.infos.Store(c, ci)
	if !p.listener.push(c) {
		p.infos.Delete(c)
		c.Close()
	}
}

// decideSNI checks the TLS server name: it must be a host name (or absent),
// it must equal an explicit CONNECT target, and the rules decide it at
// layer sni, never loosening the connection's verdict.
func (p *Proxy) decideSNI(ctx context.Context, ci *connInfo, sni string) (firewall.Verdict, bool) {
	if sni != "" {
		n, err := rules.NormalizeHost(sni)
		if err != nil {
			p.recordDeny(ctx, ci, audit.LayerSNI, fmt.Sprintf("TLS server name %q is not a host name", sni))
			return firewall.Verdict{}, false
		}
		ci.sni = n
	}
	if ci.connectHost != "" && ci.sni != "" && ci.sni != ci.connectHost {
		p.recordDeny(ctx, ci, audit.LayerSNI, fmt.Sprintf("TLS server name %s does not match CONNECT %s: domain fronting", ci.sni, ci.connectHost))
		return firewall.Verdict{}, false
	}
	f := firewall.Flow{Proto: firewall.TCP, IP: ci.dst, Port: ci.port}
	if ci.sni != "" {
		f.Names = []string{ci.sni}
	}
	v := firewall.Stricter(ci.verdict, p.cfg.Policy.Load().Verdict(f))
	if ci.spliceOnly && v.Action == firewall.Allow && ci.sni != "" && !p.sniFitsDestination(ci) {
		// Spliced, nothing after the handshake can be checked: the name
		// must be one the VM resolved for the address it dialled.
		v = firewall.Verdict{Action: firewall.Deny, Rule: firewall.RuleRef{Origin: "proxy",
			Text: "with interception off, the TLS server name must be a name the VM resolved for the address it dialled"}}
	}
	if !p.record(ctx, audit.LayerSNI, f, v, ci.sni) || v.Action == firewall.Deny {
		return v, false
	}
	return v, true
}

// sniFitsDestination: a transparent connection is spliced only when its
// SNI is a name the VM resolved for the address it dialled. Otherwise a
// pass-through name on another host's address would open an uninspected
// tunnel to that host; such a connection is intercepted instead.
func (p *Proxy) sniFitsDestination(ci *connInfo) bool {
	if !ci.transparent {
		return true // explicit: the splice dials the SNI's own addresses
	}
	for _, n := range ci.l4Names {
		if n == ci.sni {
			return true
		}
	}
	return false
}

func (p *Proxy) isPassThrough(host string) bool {
	for _, d := range p.passThrough {
		if host == d || strings.HasSuffix(host, "."+d) {
			return true
		}
	}
	return false
}

// tlsConfig serves a leaf for the SNI, or for the destination address when
// the client sent no SNI, and offers h2 and HTTP/1.1.
func (p *Proxy) tlsConfig(ci *connInfo) *tls.Config {
	name := ci.sni
	if name == "" {
		switch {
		case ci.dst.IsValid():
			name = ci.dst.String()
		default:
			name = ci.connectHost
		}
	}
	return &tls.Config{
		MinVersion: tls.VersionTLS12,
		NextProtos: []string{"h2", "http/1.1"},
		GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) {
			return p.cfg.CA.Leaf(name)
		},
	}
}

// splice relays a pass-through connection without decrypting it.
func (p *Proxy) splice(ctx context.Context, client *replayConn, ci *connInfo) {
	defer client.Close()
	dctx, cancel := context.WithTimeout(ctx, dialTimeout)
	up, err := p.dialChecked(dctx, ci, ci.sni, ci.port)
	cancel()
	if err != nil {
		p.logger.InfoContext(ctx, "pass-through dial failed", "host", ci.sni, "err", err)
		return
	}
	defer up.Close()
	relay.Both(client, up)
}

// record writes the egress.firewall event for a decision. false means it
// could not be written and the caller must deny.
func (p *Proxy) record(ctx context.Context, layer string, f firewall.Flow, v firewall.Verdict, host string) bool {
	ev := audit.FlowEvent(layer, f, v)
	if host != "" {
		ev.Host = host
	}
	if err := p.cfg.Events.Emit(ctx, ev); err != nil {
		return false
	}
	p.logger.InfoContext(ctx, "egress.firewall", "action", ev.Action, "layer", layer, "host", ev.Host, "ip", ev.IP,
		"port", ev.Port, "method", ev.Method, "rule", v.Rule.String())
	return true
}

// recordDeny records a deny that no rule made (malformed input, fronting).
func (p *Proxy) recordDeny(ctx context.Context, ci *connInfo, layer, reason string) {
	f := firewall.Flow{Proto: firewall.TCP, IP: ci.dst, Port: ci.port}
	v := firewall.Verdict{Action: firewall.Deny, Rule: firewall.RuleRef{Origin: "proxy", Text: reason}}
	ev := audit.FlowEvent(layer, f, v)
	ev.Host = ci.sni
	if ev.Host == "" {
		ev.Host = ci.connectHost
	}
	ev.Reason = reason
	p.cfg.Events.Emit(ctx, ev)
	p.logger.InfoContext(ctx, "egress.firewall", "action", "deny", "layer", layer, "host", ev.Host, "ip", ev.IP, "reason", reason)
}

// connListener is a net.Listener fed by the front: every intercepted
// connection goes through one http.Server and its timeouts.
type connListener struct {
	ch     chan net.Conn
	mu     sync.Mutex
	closed chan struct{}
	once   sync.Once
}

func newConnListener() *connListener {
	return &connListener{ch: make(chan net.Conn), closed: make(chan struct{})}
}

func (l *connListener) push(c net.Conn) bool {
	select {
	case l.ch <- c:
		return true
	case <-l.closed:
		return false
	}
}

func (l *connListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.ch:
		return c, nil
	case <-l.closed:
		return nil, net.ErrClosed
	}
}

func (l *connListener) Close() error {
	l.once.Do(func() { close(l.closed) })
	return nil
}

func (l *connListener) Addr() net.Addr {
	return &net.UnixAddr{Name: "guard-intercept", Net: "intercept"}
}

func portOf(hostport string, def uint16) uint16 {
	_, ps, err := net.SplitHostPort(hostport)
	if err != nil {
		return def
	}
	n, err := strconv.ParseUint(ps, 10, 16)
	if err != nil || n == 0 {
		return def
	}
	return uint16(n)
}
