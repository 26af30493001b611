package netstack

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"

	"guard/firewall"
	"guard/rules"
)

// fakeZone is an upstream resolver on loopback, served by miekg/dns over
// UDP and TCP.
func fakeZone(t *testing.T, records ...string) string {
	t.Helper()
	zone := map[string][]dns.RR{}
	for _, r := range records {
		rr, err := dns.NewRR(r)
		if err != nil {
			t.Fatal(err)
		}
		key := strings.ToLower(rr.Header().Name)
		zone[key] = append(zone[key], rr)
	}
	h := dns.HandlerFunc(func(w dns.ResponseWriter, req *dns.Msg) {
		m := new(dns.Msg).SetReply(req)
		q := req.Question[0]
		name := strings.ToLower(q.Name)
		for hops := 0; hops < 8; hops++ {
			next := ""
			for _, rr := range zone[name] {
				if rr.Header().Rrtype == q.Qtype || rr.Header().Rrtype == dns.TypeCNAME || q.Qtype == dns.TypeANY {
					m.Answer = append(m.Answer, rr)
					if c, ok := rr.(*dns.CNAME); ok && q.Qtype != dns.TypeCNAME {
						next = strings.ToLower(c.Target)
					}
				}
			}
			if next == "" {
				break
			}
			name = next
		}
		if len(m.Answer) == 0 && zone[strings.ToLower(q.Name)] == nil {
			m.Rcode = dns.RcodeNameError
		}
		// A long answer over UDP is truncated, as a real resolver would.
		if w.LocalAddr().Network() == "udp" && len(m.Answer) > 20 {
			m.Answer, m.Truncated = nil, true
		}
		w.WriteMsg(m)
	})
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", pc.LocalAddr().String())
	if err != nil {
		t.Fatal(err)
	}
	udp := &dns.Server{PacketConn: pc, Handler: h}
	tcp := &dns.Server{Listener: ln, Handler: h}
	go udp.ActivateAndServe()
	go tcp.ActivateAndServe()
	t.Cleanup(func() { udp.Shutdown(); tcp.Shutdown() })
	return pc.LocalAddr().String()
}

type gatewayRig struct {
	gw    *DNSGateway
	snoop *firewall.SnoopTable
}

func newGateway(t *testing.T, upstream, rulesText string) *gatewayRig {
	p, err := rules.ParseString(rulesText)
	if err != nil {
		t.Fatal(err)
	}
	snoop := firewall.NewSnoopTable(firewall.SnoopOptions{MinTTL: time.Second})
	gw := NewDNSGateway(DNSConfig{
		Upstreams: []string{upstream},
		Static:    map[string]string{"db.internal": "192.0.2.10"},
		Snoop:     snoop,
		Policy:    firewall.NewActive(firewall.Compile(p)),
		Logger:    slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	return &gatewayRig{gw: gw, snoop: snoop}
}

func (g *gatewayRig) ask(t *testing.T, name string, qtype uint16) *dns.Msg {
	t.Helper()
	q := new(dns.Msg).SetQuestion(dns.Fqdn(name), qtype)
	return g.gw.Answer(context.Background(), q)
}

func answers(m *dns.Msg) []string {
	var out []string
	for _, rr := range m.Answer {
		switch r := rr.(type) {
		case *dns.A:
			out = append(out, r.A.String())
		case *dns.AAAA:
			out = append(out, r.AAAA.String())
		case *dns.CNAME:
			out = append(out, "CNAME "+r.Target)
		default:
			out = append(out, dns.TypeToString[rr.Header().Rrtype])
		}
	}
	return out
}

func TestForwardRecordsCNAMEChainWithRealTTL(t *testing.T) {
	up := fakeZone(t,
		"www.example.test. 300 IN CNAME edge.cdn.test.",
		"edge.cdn.test. 120 IN A 203.0.113.7",
		"edge.cdn.test. 120 IN AAAA 2001:db8::7",
	)
	g := newGateway(t, up, "default deny\n")
	m := g.ask(t, "WWW.Example.test", dns.TypeA)
	if got := answers(m); !slices.Equal(got, []string{"CNAME edge.cdn.test.", "203.0.113.7"}) {
		t.Fatalf("answer %v", got)
	}
	if m.Answer[1].Header().Ttl != 120 {
		t.Fatalf("TTL %d, want the upstream's 120", m.Answer[1].Header().Ttl)
	}
	names := g.snoop.Names(netip.MustParseAddr("203.0.113.7"))
	slices.Sort(names)
	if !slices.Equal(names, []string{"edge.cdn.test", "www.example.test"}) {
		t.Fatalf("snooped %v", names)
	}
	g.ask(t, "www.example.test", dns.TypeAAAA)
	if names := g.snoop.Names(netip.MustParseAddr("2001:db8::7")); len(names) != 2 {
		t.Fatalf("AAAA snooped %v", names)
	}
}

func TestUseApplicationDNSIsNXDOMAIN(t *testing.T) {
	g := newGateway(t, fakeZone(t, "use-application-dns.net. 60 IN A 198.51.100.1"), "default allow\n")
	if m := g.ask(t, "use-application-dns.net", dns.TypeA); m.Rcode != dns.RcodeNameError {
		t.Fatalf("rcode %s", dns.RcodeToString[m.Rcode])
	}
}

func TestHTTPSAndSVCBAreStripped(t *testing.T) {
	up := fakeZone(t,
		`svc.example.test. 60 IN HTTPS 1 . alpn="h2"`,
		`svc.example.test. 60 IN SVCB 1 svc.example.test. alpn="h3"`,
		"svc.example.test. 60 IN A 203.0.113.9",
	)
	g := newGateway(t, up, "default allow\n")
	if m := g.ask(t, "svc.example.test", dns.TypeHTTPS); len(m.Answer) != 0 || m.Rcode != dns.RcodeSuccess {
		t.Fatalf("HTTPS query answered %v", answers(m))
	}
	if m := g.ask(t, "svc.example.test", dns.TypeANY); slices.Contains(answers(m), "HTTPS") || slices.Contains(answers(m), "SVCB") || !slices.Contains(answers(m), "203.0.113.9") {
		t.Fatalf("HTTPS record passed in an ANY answer: %v", answers(m))
	}
}

// TestDNSRebindingIsDropped: a public name answered with an internal
// address loses that answer, unless a rule names the name.
func TestDNSRebindingIsDropped(t *testing.T) {
	up := fakeZone(t,
		"evil.example.test. 60 IN A 127.0.0.1",
		"evil.example.test. 60 IN A 203.0.113.5",
		"meta.example.test. 60 IN A 169.254.169.254",
		"lan.example.test. 60 IN A 10.1.2.3",
		"cgnat.example.test. 60 IN A 100.64.1.1",
		"v6.example.test. 60 IN AAAA fd00::1",
		"mapped.example.test. 60 IN AAAA ::ffff:10.0.0.1",
		"wiki.corp.test. 60 IN A 10.9.9.9",
	)
	g := newGateway(t, up, "allow tcp wiki.corp.test:443\ndeny any 10.0.0.0/8\ndefault allow\n")
	cases := map[string][]string{
		"evil.example.test":   {"203.0.113.5"},
		"meta.example.test":   nil,
		"lan.example.test":    nil,
		"cgnat.example.test":  nil,
		"wiki.corp.test":      {"10.9.9.9"}, // named by a rule
		"v6.example.test":     nil,
		"mapped.example.test": nil,
	}
	for name, want := range cases {
		qtype := dns.TypeA
		if strings.HasPrefix(name, "v6") || strings.HasPrefix(name, "mapped") {
			qtype = dns.TypeAAAA
		}
		if got := answers(g.ask(t, name, qtype)); !slices.Equal(got, want) {
			t.Errorf("%s: %v, want %v", name, got, want)
		}
	}
	if g.snoop.Names(netip.MustParseAddr("127.0.0.1")) != nil {
		t.Error("a dropped answer was recorded")
	}
}

func TestStaticHostsAreTrusted(t *testing.T) {
	g := newGateway(t, fakeZone(t), "default deny\n")
	m := g.ask(t, "DB.internal", dns.TypeA)
	if got := answers(m); !slices.Equal(got, []string{"192.0.2.10"}) {
		t.Fatalf("static answer %v", got)
	}
	if names := g.snoop.Names(netip.MustParseAddr("192.0.2.10")); !slices.Equal(names, []string{"db.internal"}) {
		t.Fatalf("static answer not recorded: %v", names)
	}
}

func TestTruncatedAnswerRetriedOverTCP(t *testing.T) {
	var recs []string
	for i := range 30 {
		recs = append(recs, fmt.Sprintf("many.example.test. 60 IN A 203.0.113.%d", i+1))
	}
	g := newGateway(t, fakeZone(t, recs...), "default allow\n")
	if got := answers(g.ask(t, "many.example.test", dns.TypeA)); len(got) != 30 {
		t.Fatalf("%d answers after truncation", len(got))
	}
}

func TestUpstreamFailureIsServfail(t *testing.T) {
	pc, _ := net.ListenPacket("udp", "127.0.0.1:0")
	addr := pc.LocalAddr().String()
	pc.Close() // nothing answers here
	g := newGateway(t, addr, "default allow\n")
	if m := g.ask(t, "x.example.test", dns.TypeA); m.Rcode != dns.RcodeServerFailure {
		t.Fatalf("rcode %s", dns.RcodeToString[m.Rcode])
	}
	bad := new(dns.Msg)
	bad.Opcode = dns.OpcodeUpdate
	if m := g.gw.Answer(context.Background(), bad); m.Rcode != dns.RcodeNotImplemented {
		t.Fatalf("update: %s", dns.RcodeToString[m.Rcode])
	}
}

// FuzzHarden feeds arbitrary upstream answers through the hardening: it
// must not panic, and what comes out holds no HTTPS/SVCB record and no
// internal address for an unnamed name.
func FuzzHarden(f *testing.F) {
	seed := new(dns.Msg).SetQuestion("a.example.test.", dns.TypeA)
	rr, _ := dns.NewRR("a.example.test. 60 IN A 10.0.0.1")
	rr2, _ := dns.NewRR("a.example.test. 60 IN CNAME b.example.test.")
	seed.Answer = []dns.RR{rr2, rr}
	b, _ := seed.Pack()
	f.Add(b)
	p, _ := rules.ParseString("default allow\n")
	g := NewDNSGateway(DNSConfig{Snoop: firewall.NewSnoopTable(firewall.SnoopOptions{}), Policy: firewall.NewActive(firewall.Compile(p)),
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	f.Fuzz(func(t *testing.T, wire []byte) {
		up := new(dns.Msg)
		if up.Unpack(wire) != nil || len(up.Question) != 1 {
			return
		}
		req := new(dns.Msg).SetQuestion(up.Question[0].Name, up.Question[0].Qtype)
		out := g.harden(context.Background(), req, up)
		for _, rr := range out.Answer {
			if t := rr.Header().Rrtype; t == dns.TypeHTTPS || t == dns.TypeSVCB {
				panic("SVCB passed")
			}
			if ip, _, ok := addrOf(rr); ok && internalAddr(ip) {
				panic("internal address passed for an unnamed name: " + ip.String())
			}
		}
	})
}
