package proxy

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/netip"
	"net/textproto"
	"strconv"
	"strings"
	"sync"
	"time"

	"guard/audit"
	"guard/firewall"
)

// deniedError means the rules refused every address a host resolved to.
type deniedError struct {
	host string
	port uint16
	rule firewall.RuleRef
}

func (e *deniedError) Error() string {
	return fmt.Sprintf("connection to %s port %d refused by %s", e.host, e.port, e.rule)
}

// newTransport is the only way upstream. It verifies TLS against the
// configured roots, never reads proxy settings from the environment, and
// dials through dialChecked.
func (p *Proxy) newTransport() *http.Transport {
	return &http.Transport{
		Proxy: nil, // HTTP(S)_PROXY must not redirect guard's own traffic
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			host, portText, err := net.SplitHostPort(addr)
			if err != nil {
				return nil, err
			}
			port, _ := strconv.ParseUint(portText, 10, 16)
			var ci *connInfo
			if t, ok := targetFrom(ctx); ok {
				ci = t.ci
			}
			return p.dialChecked(ctx, ci, host, uint16(port))
		},
		TLSClientConfig:       &tls.Config{RootCAs: p.cfg.UpstreamRoots, MinVersion: tls.VersionTLS12},
		ForceAttemptHTTP2:     true,
		MaxIdleConns:          256,
		MaxIdleConnsPerHost:   32,
		IdleConnTimeout:       90 * time.Second,
		TLSHandshakeTimeout:   dialTimeout,
		ExpectContinueTimeout: time.Second,
		// The client asked for what it asked for: no silent gzip.
		DisableCompression: true,
	}
}

// maxPools bounds the per-destination connection pools kept at once.
const maxPools = 256

// upstreamPools keeps upstream connections apart by what they were checked
// for. http.Transport pools by scheme and host:port, but a transparent flow
// is dialled at the address the VM chose: a connection dialled to one
// address must never carry a request decided for another. So each original
// destination gets its own transport, resolved (explicit) flows share one,
// and a policy change starts every pool afresh: a connection checked under
// the old policy, idle or busy, takes no new request.
type upstreamPools struct {
	mu     sync.Mutex
	byDst  map[netip.Addr]*http.Transport
	shared *http.Transport
	// byCert keeps connections that present a client certificate apart,
	// per destination: they carry that credential's identity.
	byCert map[certPool]*http.Transport
	make   func() *http.Transport
}

type certPool struct {
	dst  netip.Addr
	cert *tls.Certificate
}

func (u *upstreamPools) get(t target) *http.Transport {
	u.mu.Lock()
	defer u.mu.Unlock()
	if t.scrub != nil && t.scrub.ClientCert != nil {
		key := certPool{cert: t.scrub.ClientCert}
		if t.ci != nil && t.ci.transparent {
			key.dst = t.ci.dst
		}
		if tr, ok := u.byCert[key]; ok {
			return tr
		}
		if u.byCert == nil || len(u.byCert) >= maxPools {
			u.byCert = map[certPool]*http.Transport{}
		}
		tr := u.make()
		tr.TLSClientConfig.Certificates = []tls.Certificate{*t.scrub.ClientCert}
		u.byCert[key] = tr
		return tr
	}
	if t.ci == nil || !t.ci.transparent || !t.ci.dst.IsValid() {
		if u.shared == nil {
			u.shared = u.make()
		}
		return u.shared
	}
	if tr, ok := u.byDst[t.ci.dst]; ok {
		return tr
	}
	if len(u.byDst) >= maxPools {
		for _, tr := range u.byDst {
			tr.CloseIdleConnections()
		}
		clear(u.byDst)
	}
	tr := u.make()
	u.byDst[t.ci.dst] = tr
	return tr
}

// reset drops every pool; connections already carrying a request finish it
// and are then closed as idle.
func (u *upstreamPools) reset() {
	u.mu.Lock()
	old := make([]*http.Transport, 0, len(u.byDst)+1)
	for _, tr := range u.byDst {
		old = append(old, tr)
	}
	if u.shared != nil {
		old = append(old, u.shared)
	}
	for _, tr := range u.byCert {
		old = append(old, tr)
	}
	u.byDst, u.shared, u.byCert = map[netip.Addr]*http.Transport{}, nil, nil
	u.mu.Unlock()
	for _, tr := range old {
		tr.CloseIdleConnections()
		// Busy connections become idle when their request ends; nothing
		// will pick them up again, and this closes them then.
		go func() {
			time.Sleep(idleTimeout)
			tr.CloseIdleConnections()
		}()
	}
}

// RoundTrip sends a request through the pool its target belongs to.
func (u *upstreamPools) RoundTrip(r *http.Request) (*http.Response, error) {
	t, _ := targetFrom(r.Context())
	if t.scrub != nil && len(t.scrub.pairs) > 0 {
		// 1xx answers (103 Early Hints) are relayed by the reverse proxy
		// as they come, past ModifyResponse: scrub their headers first.
		// A trace added here runs before the reverse proxy's own.
		rep := t.scrub.replacer()
		r = r.WithContext(httptrace.WithClientTrace(r.Context(), &httptrace.ClientTrace{
			Got1xxResponse: func(_ int, h textproto.MIMEHeader) error {
				for name, values := range h {
					for i, v := range values {
						h[name][i] = rep.Replace(v)
					}
				}
				return nil
			},
		}))
	}
	return u.get(t).RoundTrip(r)
}

// dialChecked dials host:port at an address the rules allow. A transparent
// connection goes to the address the VM dialled (which the network stack
// already decided); otherwise the host is resolved (static hosts first) and
// each address is decided, with the host's name, before it is dialled. The
// decision is first-match like any other: an address deny keeps a name off
// that address only if it comes before the rule that allows the name.
// Unspecified, multicast and broadcast addresses are always refused, and
// the host's own addresses need a rule that names them. Every refusal is an
// event.
func (p *Proxy) dialChecked(ctx context.Context, ci *connInfo, host string, port uint16) (net.Conn, error) {
	var addrs []netip.Addr
	switch {
	case ci != nil && ci.transparent && ci.dst.IsValid():
		addrs = []netip.Addr{ci.dst}
	default:
		var err error
		if addrs, err = p.resolve(ctx, host); err != nil {
			return nil, err
		}
	}
	var names []string
	if _, err := netip.ParseAddr(host); err != nil {
		names = []string{host}
	}
	m := p.cfg.Policy.Load()
	var lastDeny firewall.RuleRef
	var lastErr error
	d := net.Dialer{Timeout: dialTimeout}
	for _, a := range addrs {
		a = firewall.CanonicalIP(a)
		// The host's own services (loopback, its interface addresses) are
		// reachable only through a rule that names them: the matcher
		// refuses them to any and the default.
		f := firewall.Flow{Proto: firewall.TCP, IP: a, Names: names, Port: port, HostLocal: p.cfg.HostAddrs.Contains(a)}
		v := m.Verdict(f)
		if a.IsUnspecified() || a.IsMulticast() || a == netip.AddrFrom4([4]byte{255, 255, 255, 255}) {
			// 0.0.0.0 and [::] reach the host's own services.
			v = firewall.Verdict{Action: firewall.Deny, Rule: firewall.RuleRef{Origin: "proxy", Text: "unspecified, multicast or broadcast address"}}
		}
		if v.Action == firewall.Deny {
			lastDeny = v.Rule
			ev := audit.FlowEvent(audit.LayerL4, f, v)
			ev.Reason = "the address " + host + " resolved to was refused before dialling"
			p.cfg.Events.Emit(ctx, ev)
			continue
		}
		c, err := d.DialContext(ctx, "tcp", netip.AddrPortFrom(a, port).String())
		if err == nil {
			return c, nil
		}
		lastErr = err
	}
	if lastErr != nil {
		return nil, lastErr
	}
	if lastDeny.Origin != "" {
		return nil, &deniedError{host: host, port: port, rule: lastDeny}
	}
	return nil, fmt.Errorf("no address for %s", host)
}

// resolve looks a host up: IP literals as themselves, then the profile's
// static hosts, then the resolver.
func (p *Proxy) resolve(ctx context.Context, host string) ([]netip.Addr, error) {
	if a, err := netip.ParseAddr(strings.Trim(host, "[]")); err == nil {
		return []netip.Addr{a}, nil
	}
	if ip, ok := p.cfg.StaticHosts[strings.ToLower(strings.TrimSuffix(host, "."))]; ok {
		a, err := netip.ParseAddr(ip)
		if err != nil {
			return nil, err
		}
		return []netip.Addr{a}, nil
	}
	addrs, err := p.cfg.Resolver.LookupNetIP(ctx, "ip", host)
	if err != nil {
		return nil, fmt.Errorf("resolve %s: %w", host, err)
	}
	if len(addrs) == 0 {
		return nil, errors.New("no address for " + host)
	}
	return addrs, nil
}
