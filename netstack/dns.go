package netstack

import (
	"context"
	"errors"
	"log/slog"
	"net/netip"
	"strings"
	"time"

	"github.com/miekg/dns"

	"guard/firewall"
)

// Policy gives the matcher in force; *firewall.Active satisfies it.
type Policy interface {
	Load() *firewall.Matcher
}

// Snooper records which names resolved to which addresses;
// *firewall.SnoopTable satisfies it.
type Snooper interface {
	Record(names []string, ip netip.Addr, ttl time.Duration)
}

// Exchanger sends a query upstream; *dns.Client satisfies it.
type Exchanger interface {
	ExchangeContext(ctx context.Context, m *dns.Msg, address string) (*dns.Msg, time.Duration, error)
}

// DNSConfig assembles a DNSGateway.
type DNSConfig struct {
	// Upstreams are the resolvers to forward to, as host:port.
	Upstreams []string
	// Static are the profile's dns.hosts: answered directly, trusted as
	// written.
	Static map[string]string
	Snoop  Snooper
	Policy Policy
	// Exchange forwards queries (default: a dns.Client over UDP, retried
	// over TCP when the answer is truncated).
	Exchange Exchanger
	Logger   *slog.Logger
}

// staticTTL is the TTL of answers from dns.hosts.
const staticTTL = 60

// forwardTimeout bounds one upstream exchange.
const forwardTimeout = 5 * time.Second

// DNSGateway is the DNS server on the gateway address. It forwards to the
// host's resolvers with the real TTLs and records every answer in the snoop
// table, after three hardening steps:
//
//   - use-application-dns.net is NXDOMAIN, which turns off Firefox's
//     automatic DNS over HTTPS;
//   - HTTPS and SVCB records are stripped, so clients fall back to a plain
//     SNI instead of ECH;
//   - A and AAAA records that map a name to a private, loopback,
//     link-local or unspecified address are dropped (DNS rebinding), unless
//     a rule names that name and allows it.
type DNSGateway struct {
	cfg DNSConfig
}

// NewDNSGateway returns a gateway.
func NewDNSGateway(cfg DNSConfig) *DNSGateway {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Exchange == nil {
		cfg.Exchange = &udpThenTCP{}
	}
	return &DNSGateway{cfg: cfg}
}

// udpThenTCP retries a truncated UDP answer over TCP.
type udpThenTCP struct{}

func (udpThenTCP) ExchangeContext(ctx context.Context, m *dns.Msg, addr string) (*dns.Msg, time.Duration, error) {
	in, rtt, err := (&dns.Client{Net: "udp", UDPSize: dns.DefaultMsgSize}).ExchangeContext(ctx, m, addr)
	if err == nil && in.Truncated {
		return (&dns.Client{Net: "tcp"}).ExchangeContext(ctx, m, addr)
	}
	return in, rtt, err
}

// ServeDNS answers one query from the VM.
func (g *DNSGateway) ServeDNS(w dns.ResponseWriter, req *dns.Msg) {
	resp := g.Answer(context.Background(), req)
	w.WriteMsg(resp)
}

// Answer computes the reply to a query.
func (g *DNSGateway) Answer(ctx context.Context, req *dns.Msg) *dns.Msg {
	resp := new(dns.Msg)
	if req.Opcode != dns.OpcodeQuery || len(req.Question) != 1 {
		return resp.SetRcode(req, dns.RcodeNotImplemented)
	}
	q := req.Question[0]
	name := strings.ToLower(dns.Fqdn(q.Name))
	switch {
	case name == "use-application-dns.net.":
		return resp.SetRcode(req, dns.RcodeNameError)
	case q.Qtype == dns.TypeHTTPS || q.Qtype == dns.TypeSVCB:
		return resp.SetReply(req) // no data: clients fall back to A/AAAA and a plain SNI
	}
	if ip, ok := g.static(name); ok {
		return g.staticAnswer(req, q, name, ip)
	}
	up, err := g.forward(ctx, req)
	if err != nil {
		g.cfg.Logger.InfoContext(ctx, "dns: upstream failed", "name", name, "err", err)
		return resp.SetRcode(req, dns.RcodeServerFailure)
	}
	return g.harden(ctx, req, up)
}

func (g *DNSGateway) static(name string) (netip.Addr, bool) {
	s, ok := g.cfg.Static[strings.TrimSuffix(name, ".")]
	if !ok {
		return netip.Addr{}, false
	}
	a, err := netip.ParseAddr(s)
	return a, err == nil
}

func (g *DNSGateway) staticAnswer(req *dns.Msg, q dns.Question, name string, ip netip.Addr) *dns.Msg {
	resp := new(dns.Msg).SetReply(req)
	resp.Authoritative = true
	hdr := dns.RR_Header{Name: q.Name, Class: dns.ClassINET, Ttl: staticTTL}
	switch {
	case q.Qtype == dns.TypeA && ip.Is4():
		hdr.Rrtype = dns.TypeA
		resp.Answer = append(resp.Answer, &dns.A{Hdr: hdr, A: ip.AsSlice()})
	case q.Qtype == dns.TypeAAAA && ip.Is6():
		hdr.Rrtype = dns.TypeAAAA
		resp.Answer = append(resp.Answer, &dns.AAAA{Hdr: hdr, AAAA: ip.AsSlice()})
	}
	if g.cfg.Snoop != nil {
		g.cfg.Snoop.Record([]string{name}, ip, staticTTL*time.Second)
	}
	return resp
}

func (g *DNSGateway) forward(ctx context.Context, req *dns.Msg) (*dns.Msg, error) {
	if len(g.cfg.Upstreams) == 0 {
		return nil, errors.New("no upstream resolver")
	}
	var lastErr error
	for _, up := range g.cfg.Upstreams {
		cctx, cancel := context.WithTimeout(ctx, forwardTimeout)
		in, _, err := g.cfg.Exchange.ExchangeContext(cctx, req.Copy(), up)
		cancel()
		if err == nil && in != nil {
			return in, nil
		}
		lastErr = err
	}
	return nil, lastErr
}

// harden filters an upstream answer and records what it maps.
func (g *DNSGateway) harden(ctx context.Context, req, up *dns.Msg) *dns.Msg {
	resp := up.Copy()
	resp.Id = req.Id
	q := req.Question[0]
	qname := strings.ToLower(dns.Fqdn(q.Name))
	resp.Extra = stripSVCB(resp.Extra)
	resp.Ns = stripSVCB(resp.Ns)

	// Owners along the CNAME chain: qname → target → ... Each A/AAAA owner
	// is reached from qname through them.
	chain := []string{qname}
	for _, rr := range resp.Answer {
		if c, ok := rr.(*dns.CNAME); ok {
			chain = append(chain, strings.ToLower(c.Target))
		}
	}
	var kept []dns.RR
	for _, rr := range stripSVCB(resp.Answer) {
		ip, ttl, ok := addrOf(rr)
		if !ok {
			kept = append(kept, rr)
			continue
		}
		owner := strings.ToLower(rr.Header().Name)
		if internalAddr(ip) && !g.namedAllow(qname, ip) {
			g.cfg.Logger.InfoContext(ctx, "dns: dropped a rebinding answer", "name", qname, "ip", ip)
			continue
		}
		kept = append(kept, rr)
		if g.cfg.Snoop != nil {
			names := append([]string{owner}, chain...)
			g.cfg.Snoop.Record(names, ip, ttl)
		}
	}
	resp.Answer = kept
	return resp
}

func stripSVCB(rrs []dns.RR) []dns.RR {
	out := rrs[:0:0]
	for _, rr := range rrs {
		if t := rr.Header().Rrtype; t == dns.TypeHTTPS || t == dns.TypeSVCB {
			continue
		}
		out = append(out, rr)
	}
	return out
}

func addrOf(rr dns.RR) (netip.Addr, time.Duration, bool) {
	ttl := time.Duration(rr.Header().Ttl) * time.Second
	switch r := rr.(type) {
	case *dns.A:
		a, ok := netip.AddrFromSlice(r.A.To4())
		return a, ttl, ok
	case *dns.AAAA:
		a, ok := netip.AddrFromSlice(r.AAAA)
		return a.Unmap(), ttl, ok
	}
	return netip.Addr{}, 0, false
}

// internalAddr reports addresses a public name must not map to.
func internalAddr(a netip.Addr) bool {
	a = a.Unmap()
	return a.IsPrivate() || a.IsLoopback() || a.IsLinkLocalUnicast() || a.IsUnspecified() ||
		a.IsLinkLocalMulticast() || a.IsInterfaceLocalMulticast() ||
		netip.MustParsePrefix("100.64.0.0/10").Contains(a)
}

// namedAllow reports whether the first rule naming qname allows it: the
// operator's explicit say-so that this name lives on an internal address.
func (g *DNSGateway) namedAllow(qname string, _ netip.Addr) bool {
	return g.cfg.Policy != nil && g.cfg.Policy.Load().AllowsName(strings.TrimSuffix(qname, "."))
}
