package proxy

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"time"

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

// dialChecked dials host:port at an address the rules allow. A transparent
// connection goes to the address the VM dialled (which the network stack
// already decided); otherwise the host is resolved (static hosts first) and
// each address is checked with the host's name before it is dialled, so a
// DNS answer cannot rebind a name onto a denied address.
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
		if v := m.Verdict(firewall.Flow{Proto: firewall.TCP, IP: a, Names: names, Port: port}); v.Action == firewall.Deny {
			lastDeny = v.Rule
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
