package proxy

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"time"

	"github.com/elazarl/goproxy"

	"guard/audit"
	"guard/firewall"
	"guard/rules"
)

// newConnectFront configures goproxy as the CONNECT front of the explicit
// listener. goproxy's defaults are overridden: its transport would skip TLS
// verification and follow HTTPS_PROXY, and its CONNECT dialler would tunnel
// without the rules. Every CONNECT is decided here and hijacked into the
// same front as a transparent connection.
func (p *Proxy) newConnectFront() *goproxy.ProxyHttpServer {
	g := goproxy.NewProxyHttpServer()
	// goproxy's own transport is never used (absolute-form requests go to
	// the pipeline, CONNECT is hijacked), but its default is unsafe, so it
	// is replaced by one that cannot dial.
	g.Tr = &http.Transport{Proxy: nil, DialContext: func(context.Context, string, string) (net.Conn, error) {
		return nil, errors.New("guard: goproxy's transport is not used")
	}}
	g.ConnectDial = func(string, string) (net.Conn, error) {
		return nil, errors.New("guard: CONNECT tunnels are never dialled directly")
	}
	g.ConnectDialWithReq = nil
	g.Verbose = false
	g.Logger = slogPrinter{p.logger}
	g.NonproxyHandler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p.writeBlock(w, r, &Block{Status: http.StatusBadRequest, Header: http.Header{"Content-Type": {"application/json"}},
			Body: []byte(`{"message":"this is guard's proxy; send CONNECT or an absolute-form request"}` + "\n")})
	})
	g.OnRequest().HandleConnectFunc(p.handleConnect)
	return g
}

type slogPrinter struct{ l *slog.Logger }

func (s slogPrinter) Printf(format string, v ...any) { s.l.Debug(fmt.Sprintf(format, v...)) }

// handleConnect decides a CONNECT by its target and, when allowed, takes
// the tunnel into the TLS front.
func (p *Proxy) handleConnect(target string, gctx *goproxy.ProxyCtx) (*goproxy.ConnectAction, string) {
	r := gctx.Req
	ctx := context.WithoutCancel(r.Context())
	ci, f, err := connectTarget(target)
	if err != nil {
		p.recordDeny(ctx, &connInfo{}, audit.LayerL4, err.Error())
		gctx.Resp = p.rejectConnect(r, err.Error()+"; blocked by guardrails")
		return goproxy.RejectConnect, target
	}
	v := p.cfg.Policy.Load().Verdict(f)
	if !p.record(ctx, audit.LayerL4, f, v, ci.connectHost) {
		v = firewall.Verdict{Action: firewall.Deny, Rule: firewall.RuleRef{Origin: "failClosed", Text: "the event log cannot be written"}}
	}
	if v.Action == firewall.Deny {
		gctx.Resp = p.rejectConnect(r, fmt.Sprintf("CONNECT to %s refused by %s; blocked by guardrails", target, v.Rule))
		return goproxy.RejectConnect, target
	}
	ci.verdict = v
	return &goproxy.ConnectAction{Action: goproxy.ConnectHijack, Hijack: func(req *http.Request, client net.Conn, _ *goproxy.ProxyCtx) {
		if _, err := io.WriteString(client, "HTTP/1.1 200 Connection established\r\n\r\n"); err != nil {
			client.Close()
			return
		}
		p.serveConn(ctx, client, ci)
	}}, target
}

// connectTarget parses a CONNECT target into what the front knows of it.
func connectTarget(target string) (*connInfo, firewall.Flow, error) {
	host, portText, err := net.SplitHostPort(target)
	if err != nil {
		return nil, firewall.Flow{}, fmt.Errorf("CONNECT target %q is not host:port", target)
	}
	port, err := strconv.ParseUint(portText, 10, 16)
	if err != nil || port == 0 {
		return nil, firewall.Flow{}, fmt.Errorf("CONNECT target %q has a bad port", target)
	}
	ci := &connInfo{port: uint16(port)}
	f := firewall.Flow{Proto: firewall.TCP, Port: uint16(port)}
	if a, err := netip.ParseAddr(strings.Trim(host, "[]")); err == nil {
		ci.dst = firewall.CanonicalIP(a)
		ci.connectHost = ci.dst.String()
		f.IP = ci.dst
		return ci, f, nil
	}
	n, err := rules.NormalizeHost(host)
	if err != nil {
		return nil, firewall.Flow{}, fmt.Errorf("CONNECT target %q: %w", target, err)
	}
	ci.connectHost = n
	f.Names = []string{n}
	return ci, f, nil
}

func (p *Proxy) rejectConnect(r *http.Request, message string) *http.Response {
	blk := p.cfg.Renderer.Render(r, message)
	resp := &http.Response{
		StatusCode:    blk.Status,
		ProtoMajor:    1,
		ProtoMinor:    1,
		Header:        blk.Header.Clone(),
		Body:          io.NopCloser(strings.NewReader(string(blk.Body))),
		ContentLength: int64(len(blk.Body)),
		Close:         true,
		Request:       r,
	}
	resp.Header.Set("Connection", "close")
	return resp
}

// ExplicitHandler serves the explicit proxy: CONNECT through goproxy into
// the front, absolute-form requests straight into the pipeline.
func (p *Proxy) ExplicitHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.Method == http.MethodConnect:
			p.connect.ServeHTTP(replayHijacker{w}, r)
		case r.URL.IsAbs() && (r.URL.Scheme == "http" || r.URL.Scheme == "https"):
			p.serveRequest(w, r)
		default:
			p.connect.NonproxyHandler.ServeHTTP(w, r)
		}
	})
}

// replayHijacker hands goproxy a hijacked connection that first replays
// what net/http had already read past the CONNECT request: a client may
// send its ClientHello in the same write, and goproxy's ConnectHijack
// would drop those bytes.
type replayHijacker struct{ http.ResponseWriter }

func (h replayHijacker) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	c, rw, err := http.NewResponseController(h.ResponseWriter).Hijack()
	if err != nil {
		return nil, nil, err
	}
	rc := &replayConn{Conn: c, pending: drain(rw.Reader)}
	return rc, bufio.NewReadWriter(bufio.NewReader(rc), rw.Writer), nil
}

// ServeExplicit runs the explicit proxy on ln until ctx ends.
func (p *Proxy) ServeExplicit(ctx context.Context, ln net.Listener) error {
	srv := &http.Server{
		Handler:           p.ExplicitHandler(),
		ReadHeaderTimeout: p.cfg.ReadHeaderTimeout,
		IdleTimeout:       idleTimeout,
		MaxHeaderBytes:    maxHeaderBytes,
		ErrorLog:          slog.NewLogLogger(p.logger.Handler(), slog.LevelDebug),
		BaseContext:       func(net.Listener) context.Context { return ctx },
	}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	shutdown, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	srv.Shutdown(shutdown)
	srv.Close()
	<-errc
	return nil
}
