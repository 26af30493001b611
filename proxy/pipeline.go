package proxy

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"net/netip"
	"strconv"
	"strings"

	"guard/audit"
	"guard/firewall"
	"guard/rules"
)

// Guardrails is the write-policy hook (the guardrails issue fills it): it
// sees each request that passed the rules and may block it.
type Guardrails interface {
	Check(ctx context.Context, r *http.Request) (*Block, error)
}

// Credentials is the credential hook (*Swapper): it may rewrite a request
// that is about to go upstream, or refuse it with a Block; a Injection it
// returns is applied to the response.
type Credentials interface {
	Inject(ctx context.Context, r *http.Request, dst Destination) (*Injection, *Block, error)
}

// Block is a refusal with a body that fits the service's protocol.
type Block struct {
	Status int
	Header http.Header
	Body   []byte
	// Reason goes to the event log.
	Reason string
}

// Renderer renders blocks for requests that no service-specific hook
// handles: web rules and domain fronting.
type Renderer interface {
	Render(r *http.Request, message string) *Block
}

// JSONRenderer renders {"message": ...} with 403, for web rules and plain
// REST APIs.
type JSONRenderer struct{}

func (JSONRenderer) Render(r *http.Request, message string) *Block {
	body, _ := json.Marshal(struct {
		Message string `json:"message"`
	}{message})
	h := http.Header{"Content-Type": {"application/json"}}
	return &Block{Status: http.StatusForbidden, Header: h, Body: append(body, '\n'), Reason: message}
}

type allowAll struct{}

func (allowAll) Check(context.Context, *http.Request) (*Block, error) { return nil, nil }

type injectNothing struct{}

func (injectNothing) Inject(context.Context, *http.Request, Destination) (*Injection, *Block, error) {
	return nil, nil, nil
}

// requestHost returns the normalized host a request names (Host header, or
// the absolute URI's host, which net/http puts in r.Host).
func requestHost(r *http.Request) (string, error) {
	h := r.Host
	if h == "" {
		return "", errors.New("request without Host")
	}
	if host, _, err := net.SplitHostPort(h); err == nil {
		h = host
	}
	if strings.HasPrefix(h, "[") && strings.HasSuffix(h, "]") {
		// Brackets hold an IPv6 address and nothing else.
		a, err := netip.ParseAddr(h[1 : len(h)-1])
		if err != nil || !a.Is6() {
			return "", fmt.Errorf("Host %q is not a bracketed IPv6 address", r.Host)
		}
		return firewall.CanonicalIP(a).String(), nil
	}
	if a, err := netip.ParseAddr(h); err == nil {
		return firewall.CanonicalIP(a).String(), nil
	}
	return rules.NormalizeHost(h)
}

// precheck applies the per-connection consistency rules before any policy:
// the request's host must be the TLS server name, or the CONNECT target, or,
// for TLS without SNI, the address dialled. A mismatch is domain fronting.
func precheck(ci *connInfo, host string) error {
	switch {
	case ci.tls && ci.sni != "" && host != ci.sni:
		return fmt.Errorf("Host %s does not match TLS server name %s: domain fronting", host, ci.sni)
	case ci.tls && ci.sni == "" && ci.dst.IsValid() && host != ci.dst.String():
		return fmt.Errorf("Host %s on a TLS connection to %s without a server name: domain fronting", host, ci.dst)
	case ci.connectHost != "" && host != ci.connectHost:
		return fmt.Errorf("Host %s does not match CONNECT %s: domain fronting", host, ci.connectHost)
	}
	return nil
}

// serveRequest is the pipeline every intercepted request goes through, in
// order: consistency checks, web method rules, guardrails, credentials,
// forward. Each request is one event.
func (p *Proxy) serveRequest(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	ci := connInfoFrom(ctx)
	if ci == nil {
		// An absolute-form request through the explicit listener carries
		// its own target.
		ci = &connInfo{port: portOf(r.URL.Host, defaultPort(r.URL.Scheme))}
	}
	host, err := requestHost(r)
	if err != nil {
		p.block(w, r, ci, nil, p.cfg.Renderer.Render(r, fmt.Sprintf("%s blocked by guardrails", err)), http.StatusBadRequest)
		return
	}
	if err := precheck(ci, host); err != nil {
		p.block(w, r, ci, &firewall.Flow{Proto: firewall.TCP, IP: ci.dst, Names: []string{host}, Port: ci.port, Method: r.Method},
			p.cfg.Renderer.Render(r, err.Error()+" blocked by guardrails"), 0)
		return
	}
	method := r.Method
	switch {
	case method == http.MethodConnect || method == http.MethodTrace:
		// A tunnel inside an intercepted connection, or a request that
		// reflects headers back: never forwarded.
		p.block(w, r, ci, &firewall.Flow{Proto: firewall.TCP, IP: ci.dst, Names: []string{host}, Port: ci.port, Method: method},
			p.cfg.Renderer.Render(r, fmt.Sprintf("%s to %s blocked by guardrails", method, host)), http.StatusMethodNotAllowed)
		return
	case r.Header.Get("Upgrade") != "":
		if up := strings.TrimSpace(r.Header.Get("Upgrade")); !strings.EqualFold(up, "websocket") && !strings.EqualFold(up, "SPDY/3.1") {
			p.block(w, r, ci, &firewall.Flow{Proto: firewall.TCP, IP: ci.dst, Names: []string{host}, Port: ci.port, Method: method},
				p.cfg.Renderer.Render(r, fmt.Sprintf("upgrade to %q on %s blocked by guardrails", r.Header.Get("Upgrade"), host)), 0)
			return
		}
		// After a 101 the connection is a channel the method rules cannot
		// see into; a WebSocket (or SPDY, which kubectl exec and
		// port-forward fall back to) handshake is decided as its own
		// method, so that read-only and other allowlists leave it out
		// unless they name WEBSOCKET.
		method = "WEBSOCKET"
	}
	f := firewall.Flow{Proto: firewall.TCP, IP: ci.dst, Names: []string{host}, Port: ci.port, Method: method}
	v := p.decideRequest(ci, f)
	if !p.record(ctx, audit.LayerHTTP, f, v, host) {
		p.writeBlock(w, r, p.cfg.Renderer.Render(r, "the event log cannot be written; "+r.Method+" to "+host+" blocked by guardrails"))
		return
	}
	if v.Action == firewall.Deny {
		p.writeBlock(w, r, p.cfg.Renderer.Render(r, fmt.Sprintf("%s to %s blocked by guardrails", method, host)))
		return
	}
	if blk, err := p.cfg.Guardrails.Check(ctx, r); err != nil || blk != nil {
		if blk == nil {
			blk = p.cfg.Renderer.Render(r, fmt.Sprintf("%s to %s could not be checked (%v) and was blocked by guardrails", r.Method, host, err))
		}
		p.writeBlock(w, r, blk)
		return
	}
	// The scope check takes the host as sent: "github.com." is not a
	// credential's "github.com".
	sentHost := strings.ToLower(r.Host)
	if h, _, err := net.SplitHostPort(sentHost); err == nil {
		sentHost = h
	}
	scrub, blk, err := p.cfg.Credentials.Inject(ctx, r, Destination{Host: strings.Trim(sentHost, "[]"), TLS: ci.tls || r.URL.Scheme == "https"})
	if err != nil {
		p.writeBlock(w, r, p.cfg.Renderer.Render(r, fmt.Sprintf("%s to %s: credentials could not be prepared (%v); blocked by guardrails", r.Method, host, err)))
		return
	}
	if blk != nil {
		p.writeBlock(w, r, blk)
		return
	}
	body := &bodyReader{ReadCloser: r.Body}
	if r.Body != nil && r.Body != http.NoBody {
		r.Body = body
	}
	r = r.WithContext(withTarget(ctx, target{host: host, port: ci.port, tls: ci.tls || r.URL.Scheme == "https", ci: ci, body: body, scrub: scrub}))
	p.forward.ServeHTTP(w, r)
}

// bodyReader remembers a failure reading the client's body, so that a
// malformed body is answered as the client's fault (400), not the
// upstream's (502).
type bodyReader struct {
	io.ReadCloser
	err error
}

func (b *bodyReader) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err != nil && err != io.EOF {
		b.err = err
	}
	return n, err
}

// decideRequest decides a request by method. The names a client offers are
// its own to choose, so the request is decided both by the connection's
// DNS names and by its Host, and the stricter verdict wins: a web rule that
// intercepted the connection keeps its method list.
func (p *Proxy) decideRequest(ci *connInfo, f firewall.Flow) firewall.Verdict {
	m := p.cfg.Policy.Load()
	v := m.Verdict(f)
	if ci.transparent {
		l4 := f
		l4.Names = ci.l4Names
		v = firewall.Stricter(m.Verdict(l4), v)
	}
	return v
}

func defaultPort(scheme string) uint16 {
	if scheme == "https" {
		return 443
	}
	return 80
}

// block records a deny that no rule made and writes the block.
func (p *Proxy) block(w http.ResponseWriter, r *http.Request, ci *connInfo, f *firewall.Flow, blk *Block, status int) {
	if f == nil {
		f = &firewall.Flow{Proto: firewall.TCP, IP: ci.dst, Port: ci.port, Method: r.Method}
	}
	v := firewall.Verdict{Action: firewall.Deny, Rule: firewall.RuleRef{Origin: "proxy", Text: blk.Reason}}
	ev := audit.FlowEvent(audit.LayerHTTP, *f, v)
	ev.Reason = blk.Reason
	p.cfg.Events.Emit(r.Context(), ev)
	if status != 0 {
		blk.Status = status
	}
	p.writeBlock(w, r, blk)
}

// writeBlock sends a block and, on HTTP/1, closes the connection after it:
// a refused request's body may be unread, and the client should not reuse
// the connection for a retry loop. HTTP/2 has no Connection header; the
// stream ends and the connection stays.
func (p *Proxy) writeBlock(w http.ResponseWriter, r *http.Request, blk *Block) {
	for k, vs := range blk.Header {
		w.Header()[k] = vs
	}
	w.Header().Set("Content-Length", strconv.Itoa(len(blk.Body)))
	if r.ProtoMajor < 2 {
		w.Header().Set("Connection", "close")
	}
	w.WriteHeader(blk.Status)
	w.Write(blk.Body)
}

// target is where a request goes upstream.
type target struct {
	host  string
	port  uint16
	tls   bool
	ci    *connInfo
	body  *bodyReader
	scrub *Injection // reals injected into this request, to scrub from its response
}

type targetKey struct{}

func withTarget(ctx context.Context, t target) context.Context {
	return context.WithValue(ctx, targetKey{}, t)
}

func targetFrom(ctx context.Context) (target, bool) {
	t, ok := ctx.Value(targetKey{}).(target)
	return t, ok
}

// rewrite points the outgoing request at the checked host and port. The
// Host header stays what the client sent; nothing is added (no
// X-Forwarded-For: the VM's address is nobody's business).
func (p *Proxy) rewrite(pr *httputil.ProxyRequest) {
	t, _ := targetFrom(pr.In.Context())
	pr.Out.URL.Scheme = "http"
	if t.tls {
		pr.Out.URL.Scheme = "https"
	}
	pr.Out.URL.Host = net.JoinHostPort(t.host, strconv.Itoa(int(t.port)))
	pr.Out.Host = pr.In.Host
	// Request trailers arrive when the body ends; share the map so that the
	// values the server reads reach the upstream request.
	pr.Out.Trailer = pr.In.Trailer
}

// upstreamError answers when the upstream could not be reached: 403 when the
// rules refused every address, 502 otherwise.
func (p *Proxy) upstreamError(w http.ResponseWriter, r *http.Request, err error) {
	var denied *deniedError
	if errors.As(err, &denied) {
		p.writeBlock(w, r, p.cfg.Renderer.Render(r, denied.Error()+"; blocked by guardrails"))
		return
	}
	if t, ok := targetFrom(r.Context()); ok && t.body != nil && errors.Is(t.body.err, errCompromise) {
		p.writeBlock(w, r, compromiseBlock("a fake credential in the body of a request to "+t.host))
		return
	}
	if t, ok := targetFrom(r.Context()); ok && t.body != nil && t.body.err != nil {
		p.writeBlock(w, r, &Block{Status: http.StatusBadRequest, Header: http.Header{"Content-Type": {"application/json"}},
			Body: []byte(`{"message":"malformed request body"}` + "\n")})
		return
	}
	if errors.Is(err, context.Canceled) {
		return
	}
	p.logger.InfoContext(r.Context(), "upstream failed", "host", r.Host, "err", err)
	body, _ := json.Marshal(struct {
		Message string `json:"message"`
	}{fmt.Sprintf("guard could not reach %s: %v", r.Host, err)})
	w.Header().Set("Content-Type", "application/json")
	if r.ProtoMajor < 2 {
		w.Header().Set("Connection", "close")
	}
	w.WriteHeader(http.StatusBadGateway)
	w.Write(append(body, '\n'))
}
