package firewall

import (
	"fmt"
	"math/rand/v2"
	"net/netip"
	"strings"
	"testing"

	"guard/rules"
)

func mustCompile(t testing.TB, text string, ex ...Exemption) *Matcher {
	t.Helper()
	p, err := rules.ParseString(strings.TrimPrefix(text, "\n"))
	if err != nil {
		t.Fatal(err)
	}
	return Compile(p, ex...)
}

const designExample = `allow tcp api.github.com:443
allow web api.example.com GET,POST      # only these verbs reach the site
deny  web api.internal PUT,DELETE       # block these verbs, allow the rest
deny  udp any:53
deny  any 10.0.0.0/8
default deny
`

type verdictCase struct {
	name   string
	flow   Flow
	action Action
	line   int // 0: the default decided
}

func tcp(port uint16, ip string, names ...string) Flow {
	f := Flow{Proto: TCP, Port: port, Names: names}
	if ip != "" {
		f.IP = netip.MustParseAddr(ip)
	}
	return f
}

func udp(port uint16, ip string, names ...string) Flow {
	f := tcp(port, ip, names...)
	f.Proto = UDP
	return f
}

func method(f Flow, m string) Flow { f.Method = m; return f }

func runVerdicts(t *testing.T, m *Matcher, cases []verdictCase) {
	t.Helper()
	for _, tt := range cases {
		t.Run(tt.name, func(t *testing.T) {
			v := m.Verdict(tt.flow)
			if v.Action != tt.action {
				t.Errorf("action %v, want %v (rule %v)", v.Action, tt.action, v.Rule)
			}
			if tt.line == 0 && !v.Default() {
				t.Errorf("decided by %v, want the default", v.Rule)
			}
			if tt.line != 0 && (v.Default() || v.Rule.Line != tt.line) {
				t.Errorf("decided by %v, want line %d", v.Rule, tt.line)
			}
		})
	}
}

func TestDesignExample(t *testing.T) {
	m := mustCompile(t, designExample)
	runVerdicts(t, m, []verdictCase{
		{"github api over tls", tcp(443, "140.82.112.6", "api.github.com"), Allow, 1},
		{"github api other port", tcp(80, "140.82.112.6", "api.github.com"), Deny, 0},
		{"github api over udp", udp(443, "140.82.112.6", "api.github.com"), Deny, 0},
		{"github apex is not api", tcp(443, "140.82.112.3", "github.com"), Deny, 0},
		{"subdomain of api.github.com", tcp(443, "", "x.api.github.com"), Allow, 1},
		{"web rule intercepts", tcp(443, "192.0.2.1", "api.example.com"), Intercept, 2},
		{"web rule any port", tcp(8080, "192.0.2.1", "api.example.com"), Intercept, 2},
		{"web rule GET", method(tcp(443, "", "api.example.com"), "GET"), Allow, 2},
		{"web rule lower-case post", method(tcp(443, "", "api.example.com"), "post"), Allow, 2},
		{"web rule DELETE not listed", method(tcp(443, "", "api.example.com"), "DELETE"), Deny, 2},
		{"web rule is tcp only", udp(443, "192.0.2.1", "api.example.com"), Deny, 0},
		{"denylist intercepts", tcp(443, "", "api.internal"), Intercept, 3},
		{"denylist GET passes", method(tcp(443, "", "api.internal"), "GET"), Allow, 3},
		{"denylist PUT blocked", method(tcp(443, "", "api.internal"), "PUT"), Deny, 3},
		{"denylist delete blocked", method(tcp(443, "", "api.internal"), "delete"), Deny, 3},
		{"dns anywhere", udp(53, "8.8.8.8"), Deny, 4},
		{"dns over tcp falls to default", tcp(53, "8.8.8.8"), Deny, 0},
		{"private range", tcp(22, "10.1.2.3"), Deny, 5},
		{"mapped private range", tcp(22, "::ffff:10.1.2.3"), Deny, 5},
		{"nat64 private range", tcp(22, "64:ff9b::a01:203"), Deny, 5},
		{"private ip named api.github.com: first match wins", tcp(443, "10.1.2.3", "api.github.com"), Allow, 1},
		{"nothing matches", tcp(443, "203.0.113.9", "example.org"), Deny, 0},
	})
}

func TestHostnameEdgeCases(t *testing.T) {
	m := mustCompile(t, `
deny  tcp internal.example.com
allow tcp *.wild.example
allow tcp example.com
allow tcp xn--bcher-kva.example
default deny
`)
	runVerdicts(t, m, []verdictCase{
		{"case and trailing dot", tcp(443, "", "LOGIN.INTERNAL.EXAMPLE.COM."), Deny, 1},
		{"suffix attack", tcp(443, "", "internal.example.com.evil"), Deny, 0},
		{"over-match attack", tcp(443, "", "notexample.com"), Deny, 0},
		{"apex", tcp(443, "", "example.com"), Allow, 3},
		{"deep subdomain", tcp(443, "", "a.b.c.example.com"), Allow, 3},
		{"wildcard skips apex", tcp(443, "", "wild.example"), Deny, 0},
		{"wildcard subdomain", tcp(443, "", "x.wild.example"), Allow, 2},
		{"wildcard deep", tcp(443, "", "y.x.wild.example"), Allow, 2},
		{"unicode name is punycoded", tcp(443, "", "Bücher.example"), Allow, 4},
		{"punycode name", tcp(443, "", "www.xn--bcher-kva.example"), Allow, 4},
		{"empty name is no name", tcp(443, "", ""), Deny, 0},
		{"any name that matches is enough", tcp(443, "", "nope.test", "example.com"), Allow, 3},
		{"earliest matching rule across names", tcp(443, "", "example.com", "internal.example.com"), Deny, 1},
	})
}

// TestInvalidNameDenies: a name that cannot be normalized must not simply be
// skipped, or it would walk past a deny-by-name rule under default allow.
func TestInvalidNameDenies(t *testing.T) {
	m := mustCompile(t, "deny tcp evil.example\ndefault allow\n")
	for _, name := range []string{"evil.example..", "[evil.example]", "evil.example:443", "*.evil.example", "evil example", "010.0.0.1", "evil.example\x00"} {
		v := m.Verdict(tcp(443, "203.0.113.5", "ok.example", name))
		if v.Action != Deny || v.Rule.Origin != OriginInvalidName {
			t.Errorf("%q: %v by %v", name, v.Action, v.Rule)
		}
	}
	if v := m.Verdict(tcp(443, "203.0.113.5", "EVIL.example.")); v.Action != Deny || v.Rule.Line != 1 {
		t.Errorf("normalizable spelling: %v by %v", v.Action, v.Rule)
	}
}

// TestMalformedFlowsDeny: port 0 and methods that are not HTTP tokens must
// not slip past ported or method deny rules.
func TestMalformedFlowsDeny(t *testing.T) {
	m := mustCompile(t, "deny udp any:1-1023\ndeny web x.example DELETE\nallow web y.example POST\ndefault allow\n")
	for _, f := range []Flow{
		udp(0, "192.0.2.1"),
		method(tcp(443, "", "x.example"), "DELETE "),
		method(tcp(443, "", "x.example"), " DELETE"),
		method(tcp(443, "", "x.example"), "DEL\u0131TE"),
	} {
		if v := m.Verdict(f); v.Action != Deny || v.Rule.Origin != OriginInvalidFlow {
			t.Errorf("%+v: %v by %v", f, v.Action, v.Rule)
		}
	}
	// "poſt" must not fold into POST and pass the allow list.
	if v := m.Verdict(method(tcp(443, "", "y.example"), "po\u017ft")); v.Action != Deny {
		t.Errorf("unicode fold passed an allow list: %v by %v", v.Action, v.Rule)
	}
}

// TestNAT64AndMappedSpellings: a NAT64 address is matched both as itself and
// as the IPv4 host it reaches; a mapped address is IPv4.
func TestNAT64AndMappedSpellings(t *testing.T) {
	m := mustCompile(t, "deny any 64:ff9b::/96\ndeny any 10.0.0.0/8\ndeny any ::/0\ndefault allow\n")
	runVerdicts(t, m, []verdictCase{
		{"nat64 rule", tcp(443, "64:ff9b::c000:201"), Deny, 1},
		{"nat64 to a denied v4 range, v4 rule first", Flow{Proto: TCP, Port: 1, IP: netip.MustParseAddr("64:ff9b::a00:1")}, Deny, 1},
		{"mapped is IPv4, not IPv6", tcp(443, "::ffff:192.0.2.1"), Allow, 0},
		{"mapped private", tcp(443, "::ffff:10.0.0.1"), Deny, 2},
		{"plain IPv6", tcp(443, "2001:db8::1"), Deny, 3},
		{"unbracketed v6 literal name", tcp(443, "", "2001:db8::1"), Deny, 3},
		{"v6 literal name starting with a letter", tcp(443, "", "fd00::1"), Deny, 3},
	})
	m = mustCompile(t, "deny any 10.0.0.0/8\ndefault allow\n")
	if v := m.Verdict(tcp(22, "64:ff9b::a00:1")); v.Action != Deny || v.Rule.Line != 1 {
		t.Errorf("NAT64 walked around an IPv4 deny: %v by %v", v.Action, v.Rule)
	}
}

func TestStricter(t *testing.T) {
	allow := Verdict{Action: Allow, Rule: RuleRef{Line: 1}}
	icpt := Verdict{Action: Intercept, Rule: RuleRef{Line: 2}}
	deny := Verdict{Action: Deny, Rule: RuleRef{Line: 3}}
	tests := []struct{ a, b, want Verdict }{
		{allow, icpt, icpt}, {icpt, allow, icpt}, {icpt, deny, deny}, {deny, allow, deny},
		{allow, Verdict{Action: Allow, Rule: RuleRef{Line: 9}}, allow},
	}
	for _, tt := range tests {
		if got := Stricter(tt.a, tt.b); got != tt.want {
			t.Errorf("Stricter(%v, %v) = %v", tt.a, tt.b, got)
		}
	}
	// A forged SNI naming an allowed host cannot lift an intercepted flow
	// out of its web rule.
	m := mustCompile(t, "allow tcp api.github.com:443\nallow web *.example.com read-only\ndefault deny\n")
	l4 := m.Verdict(tcp(443, "192.0.2.9", "x.example.com"))
	sni := m.Verdict(tcp(443, "192.0.2.9", "api.github.com"))
	if got := Stricter(l4, sni); got.Action != Intercept {
		t.Fatalf("forged SNI loosened the verdict: %v", got)
	}
}

func TestAddresses(t *testing.T) {
	m := mustCompile(t, `
allow tcp 192.0.2.10:22
deny  any 192.0.2.0/24
allow tcp [2001:db8::/32]:443
deny  any 2001:db8::1
allow any ::ffff:198.51.100.0/120
deny  any 0.0.0.0/0
allow any ::/0
`)
	runVerdicts(t, m, []verdictCase{
		{"host route", tcp(22, "192.0.2.10"), Allow, 1},
		{"host route other port", tcp(23, "192.0.2.10"), Deny, 2},
		{"mapped host route", tcp(22, "::ffff:192.0.2.10"), Allow, 1},
		{"ip literal as a name", tcp(22, "", "192.0.2.10"), Allow, 1},
		{"bracketed v6 literal as a name", tcp(443, "", "[2001:db8::5]"), Allow, 3},
		{"v6 prefix with port", tcp(443, "2001:db8::1"), Allow, 3},
		{"v6 host route after prefix", tcp(80, "2001:db8::1"), Deny, 4},
		{"v6 zone ignored", tcp(443, "fe80::1%eth0"), Allow, 7},
		{"nat64 of a v4 host route", tcp(22, "64:ff9b::c000:20a"), Allow, 1},
		{"mapped rule matches v4 flow", udp(53, "198.51.100.7"), Allow, 5},
		{"v4 catch-all", tcp(80, "203.0.113.1"), Deny, 6},
		{"mapped flow hits v4 catch-all, not ::/0", tcp(80, "::ffff:203.0.113.1"), Deny, 6},
		{"v6 catch-all", tcp(80, "2606:4700::1"), Allow, 7},
		{"icmp matches a portless rule", Flow{Proto: ICMP, IP: netip.MustParseAddr("192.0.2.9")}, Deny, 2},
		{"no ip no name: default", tcp(80, ""), Allow, 0},
	})
}

func TestPorts(t *testing.T) {
	m := mustCompile(t, `
allow tcp example.com:22,80,8000-8010
deny tcp any:1-1023
allow udp any:60000-61000
default deny
`)
	runVerdicts(t, m, []verdictCase{
		{"listed port", tcp(22, "", "example.com"), Allow, 1},
		{"range start", tcp(8000, "", "example.com"), Allow, 1},
		{"range end", tcp(8010, "", "example.com"), Allow, 1},
		{"past range", tcp(8011, "", "example.com"), Deny, 0},
		{"low port", tcp(443, "", "example.com"), Deny, 2},
		{"udp range", udp(60500, "192.0.2.1"), Allow, 3},
		{"icmp never matches a ported rule", Flow{Proto: ICMP, Names: []string{"example.com"}}, Deny, 0},
	})
}

func TestWebRuleForms(t *testing.T) {
	m := mustCompile(t, `
allow web open.example
deny web closed.example
allow web ro.example read-only
allow tcp plain.example
`)
	runVerdicts(t, m, []verdictCase{
		{"allow web without list intercepts", tcp(443, "", "open.example"), Intercept, 1},
		{"allow web without list passes any method", method(tcp(443, "", "open.example"), "DELETE"), Allow, 1},
		{"deny web without list denies the connection", tcp(443, "", "closed.example"), Deny, 2},
		{"deny web without list denies requests", method(tcp(443, "", "closed.example"), "GET"), Deny, 2},
		{"read-only GET", method(tcp(443, "", "ro.example"), "GET"), Allow, 3},
		{"read-only OPTIONS", method(tcp(443, "", "ro.example"), "OPTIONS"), Allow, 3},
		{"read-only POST", method(tcp(443, "", "ro.example"), "POST"), Deny, 3},
		{"tcp rule passes every method", method(tcp(443, "", "plain.example"), "DELETE"), Allow, 4},
	})
}

func TestExemptionComesFirst(t *testing.T) {
	ex := Exemption{Rule: rules.Rule{Action: rules.Allow, Proto: rules.TCP,
		Target: rules.Target{Kind: rules.Prefix, Prefix: netip.MustParsePrefix("127.0.0.1/32")},
		Ports:  rules.PortSet{{Lo: 11434, Hi: 11434}}}, Origin: "localInference"}
	m := mustCompile(t, "deny any any\ndefault deny\n", ex)
	v := m.Verdict(tcp(11434, "127.0.0.1"))
	if v.Action != Allow || v.Rule.Origin != "localInference" || v.Rule.Text != "allow tcp 127.0.0.1:11434" {
		t.Fatalf("got %+v", v)
	}
	if v := m.Verdict(tcp(11435, "127.0.0.1")); v.Action != Deny || v.Rule.Line != 1 {
		t.Fatalf("exemption leaked to another port: %+v", v)
	}
}

// reference is the obvious linear first-match scan, written apart from the
// matcher (its own normalization, protocol, port and method logic), to check
// the indexed matcher against and as the benchmark baseline. It handles the
// ASCII names the generators make.
func reference(p *rules.Policy, f Flow) (Action, int) {
	if (f.Proto == TCP || f.Proto == UDP) && f.Port == 0 {
		return Deny, -2
	}
	var ips []netip.Addr
	var names []string
	addIP := func(a netip.Addr) {
		a = a.WithZone("").Unmap()
		ips = append(ips, a)
		if b := a.As16(); a.Is6() && b[0] == 0 && b[1] == 0x64 && b[2] == 0xff && b[3] == 0x9b && b[4]|b[5]|b[6]|b[7]|b[8]|b[9]|b[10]|b[11] == 0 {
			ips = append(ips, netip.AddrFrom4([4]byte{b[12], b[13], b[14], b[15]}))
		}
	}
	if f.IP.IsValid() {
		addIP(f.IP)
	}
	toHost := f.HostLocal
	for _, a := range ips[:min(len(ips), 2)] {
		toHost = toHost || (f.IP.IsValid() && a.IsLoopback())
	}
	for _, n := range f.Names {
		if a, err := netip.ParseAddr(strings.Trim(n, "[]")); err == nil {
			addIP(a)
			continue
		}
		names = append(names, strings.ToLower(strings.TrimSuffix(n, ".")))
	}
	targetMatch := func(t rules.Target) bool {
		switch t.Kind {
		case rules.AnyTarget:
			return true
		case rules.Prefix:
			for _, ip := range ips {
				if t.Prefix.Contains(ip) {
					return true
				}
			}
		case rules.Domain, rules.Subdomains:
			for _, n := range names {
				if strings.HasSuffix(n, "."+t.Host) || (t.Kind == rules.Domain && n == t.Host) {
					return true
				}
			}
		}
		return false
	}
	protoMatch := func(r *rules.Rule) bool {
		switch r.Proto {
		case rules.TCP, rules.Web:
			return f.Proto == TCP
		case rules.UDP:
			return f.Proto == UDP
		}
		return true
	}
	portMatch := func(r *rules.Rule) bool {
		if len(r.Ports) == 0 {
			return true
		}
		if f.Proto == ICMP {
			return false
		}
		for _, pr := range r.Ports {
			if pr.Lo <= f.Port && f.Port <= pr.Hi {
				return true
			}
		}
		return false
	}
	for i := range p.Rules {
		r := &p.Rules[i]
		if !targetMatch(r.Target) || !protoMatch(r) || !portMatch(r) {
			continue
		}
		allow := r.Action == rules.Allow
		act := Deny
		switch {
		case r.Proto != rules.Web:
		case f.Method == "" && !allow && r.Methods == nil:
		case f.Method == "":
			act = Intercept
		case r.Methods != nil:
			listed := false
			for _, m := range r.Methods {
				listed = listed || strings.EqualFold(m, f.Method)
			}
			allow = listed == allow
		}
		if act != Intercept && allow {
			act = Allow
		}
		opens := r.Target.Kind == rules.Domain || (r.Target.Kind == rules.Prefix && r.Target.Prefix.Bits() > 0)
		if act != Deny && !opens && toHost {
			return Deny, -3
		}
		return act, i
	}
	if p.Default == rules.Deny {
		return Deny, -1
	}
	if toHost {
		return Deny, -3
	}
	return Allow, -1
}

// checkAgainstReference fails the test when the matcher and the linear scan
// disagree on f.
func checkAgainstReference(t *testing.T, p *rules.Policy, m *Matcher, f Flow, text string) {
	t.Helper()
	want, idx := reference(p, f)
	got := m.Verdict(f)
	ok := got.Action == want
	switch {
	case idx == -2:
		ok = ok && got.Rule.Origin == OriginInvalidFlow
	case idx == -3:
		ok = ok && got.Rule.Origin == OriginHostLocal
	case idx == -1:
		ok = ok && got.Default()
	default:
		ok = ok && got.Rule.Origin == OriginRules && got.Rule.Line == p.Rules[idx].Line
	}
	if !ok {
		t.Fatalf("flow %+v: got %v by %v, want %v by rule index %d\n%s", f, got.Action, got.Rule, want, idx, text)
	}
}

// TestMatchesLinearScan compares the indexed matcher with the linear scan on
// random policies and flows.
func TestMatchesLinearScan(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 11))
	for round := range 200 {
		text, hosts, nets := randomPolicyText(r, 1+r.IntN(200))
		p, err := rules.ParseString(text)
		if err != nil {
			t.Fatalf("generator made a bad policy: %v\n%s", err, text)
		}
		m := Compile(p)
		for range 200 {
			checkAgainstReference(t, p, m, randomFlow(r, hosts, nets), fmt.Sprintf("round %d:\n%s", round, text))
		}
	}
}

// TestDenseMatchesLinearScan draws rules and flows from a tiny universe of
// names and addresses, so that prefixes nest and overlap, every prefix
// length including /0, /32 and /128 occurs, and apex and wildcard rules
// share hosts; flows come in IPv4, IPv6, mapped and NAT64 spellings.
func TestDenseMatchesLinearScan(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 5))
	labels := []string{"a", "b", "c"}
	name := func() string {
		parts := make([]string, 1+r.IntN(3))
		for i := range parts {
			parts[i] = labels[r.IntN(len(labels))]
		}
		return strings.Join(parts, ".") + ".test"
	}
	v4 := func() netip.Addr {
		b := [4]byte{10, byte(r.IntN(4)) << 6, byte(r.IntN(2)), byte(r.IntN(4)) | byte(r.IntN(2))<<7}
		if r.IntN(8) == 0 {
			b[0] = byte(r.IntN(256))
		}
		return netip.AddrFrom4(b)
	}
	v6 := func() netip.Addr {
		var b [16]byte
		b[0], b[1], b[7], b[8], b[15] = 0x20, 0x01, byte(r.IntN(4))<<6, byte(r.IntN(2))<<7, byte(r.IntN(4))
		switch r.IntN(6) {
		case 0:
			b[0] = byte(r.IntN(256))
		case 1: // NAT64 space
			b = [16]byte{1: 0x64, 2: 0xff, 3: 0x9b, 12: 10, 15: byte(r.IntN(4))}
		}
		return netip.AddrFrom16(b)
	}
	for round := range 1500 {
		var sb strings.Builder
		for range 1 + r.IntN(30) {
			line := []string{"allow", "deny"}[r.IntN(2)] + " " + []string{"tcp", "udp", "any", "web"}[r.IntN(4)] + " "
			target, bracket := "", false
			switch r.IntN(5) {
			case 0:
				target = name()
			case 1:
				target = "*." + name()
			case 2:
				target = netip.PrefixFrom(v4(), r.IntN(33)).Masked().String()
			case 3:
				target = netip.PrefixFrom(v6(), []int{0, 1, 16, 56, 57, 63, 64, 65, 96, 120, 127, 128}[r.IntN(12)]).Masked().String()
				bracket = true
			default:
				target = "any"
			}
			if r.IntN(2) == 0 {
				if bracket {
					target = "[" + target + "]"
				}
				target += ":" + []string{"22", "80", "80,443", "1-100", "443", "1-65535", "2-65535"}[r.IntN(7)]
			}
			line += target
			if strings.HasPrefix(line, "allow web") || strings.HasPrefix(line, "deny web") {
				line += []string{"", " GET,POST", " read-only", " DELETE"}[r.IntN(4)]
			}
			sb.WriteString(line + "\n")
		}
		sb.WriteString([]string{"default allow\n", "default deny\n"}[r.IntN(2)])
		text := sb.String()
		p, err := rules.ParseString(text)
		if err != nil {
			t.Fatalf("generator: %v\n%s", err, text)
		}
		m := Compile(p)
		for range 100 {
			f := Flow{Proto: []Proto{TCP, UDP, ICMP}[r.IntN(3)], Port: []uint16{22, 80, 443, 1, 100, 101, 65535, 0}[r.IntN(8)]}
			if f.Proto == ICMP {
				f.Port = 0
			}
			switch r.IntN(5) {
			case 0:
				f.IP = v4()
			case 1:
				f.IP = v6()
			case 2:
				f.IP = netip.AddrFrom16(v4().As16())
			case 3:
				a := v4().As4()
				f.IP = netip.AddrFrom16([16]byte{1: 0x64, 2: 0xff, 3: 0x9b, 12: a[0], 13: a[1], 14: a[2], 15: a[3]})
			}
			for range r.IntN(3) {
				n := name()
				if r.IntN(4) == 0 {
					n = strings.ToUpper(n) + "."
				}
				f.Names = append(f.Names, n)
			}
			if f.Proto == TCP && r.IntN(3) == 0 {
				f.Method = []string{"GET", "post", "DELETE", "PATCH"}[r.IntN(4)]
			}
			checkAgainstReference(t, p, m, f, fmt.Sprintf("round %d:\n%s", round, text))
		}
	}
}

func randomLabel(r *rand.Rand) string {
	const letters = "abcdefghijklmnopqrstuvwxyz"
	n := 2 + r.IntN(6)
	b := make([]byte, n)
	for i := range b {
		b[i] = letters[r.IntN(len(letters))]
	}
	return string(b)
}

// randomPolicyText returns rules text mixing hosts, wildcards, CIDRs, ports
// and methods, plus the hosts and networks it used so flows can hit them.
func randomPolicyText(r *rand.Rand, n int) (string, []string, []netip.Prefix) {
	var b strings.Builder
	var hosts []string
	var nets []netip.Prefix
	tlds := []string{"com", "net", "io", "test"}
	protos := []string{"tcp", "udp", "any", "web"}
	for range n {
		action := []string{"allow", "deny"}[r.IntN(2)]
		proto := protos[r.IntN(len(protos))]
		var target string
		switch k := r.IntN(100); {
		case k < 40:
			h := randomLabel(r) + "." + tlds[r.IntN(len(tlds))]
			if r.IntN(2) == 0 {
				h = randomLabel(r) + "." + h
			}
			hosts = append(hosts, h)
			target = h
		case k < 55:
			h := randomLabel(r) + "." + tlds[r.IntN(len(tlds))]
			hosts = append(hosts, h)
			target = "*." + h
		case k < 85:
			a := netip.AddrFrom4([4]byte{byte(r.IntN(256)), byte(r.IntN(256)), byte(r.IntN(256)), byte(r.IntN(256))})
			pfx := netip.PrefixFrom(a, 8+r.IntN(25)).Masked()
			nets = append(nets, pfx)
			target = pfx.String()
		case k < 99:
			var a [16]byte
			a[0], a[1] = 0x20, 0x01
			for i := 2; i < 16; i++ {
				a[i] = byte(r.IntN(256))
			}
			pfx := netip.PrefixFrom(netip.AddrFrom16(a), 32+r.IntN(97)).Masked()
			nets = append(nets, pfx)
			target = "[" + pfx.String() + "]"
		default:
			target = "any"
		}
		// An any-target rule without ports is a catch-all; real policies
		// keep those rare and port-bound ones ("deny udp any:53") common.
		if r.IntN(3) == 0 || (target == "any" && r.IntN(10) > 0) {
			switch r.IntN(3) {
			case 0:
				target += fmt.Sprintf(":%d", []int{22, 53, 80, 443, 8080}[r.IntN(5)])
			case 1:
				target += ":80,443"
			default:
				target += ":8000-9000"
			}
		} else if strings.HasPrefix(target, "[") {
			target = strings.Trim(target, "[]")
		}
		line := action + " " + proto + " " + target
		if proto == "web" && r.IntN(2) == 0 {
			line += " " + []string{"GET,POST", "read-only", "PUT,DELETE", "methods PATCH"}[r.IntN(4)]
		}
		b.WriteString(line + "\n")
	}
	b.WriteString("default " + []string{"allow", "deny"}[r.IntN(2)] + "\n")
	return b.String(), hosts, nets
}

func randomFlow(r *rand.Rand, hosts []string, nets []netip.Prefix) Flow {
	f := Flow{Proto: []Proto{TCP, UDP, ICMP}[r.IntN(3)], Port: []uint16{22, 53, 80, 443, 8080, 8500, 9999}[r.IntN(7)]}
	if f.Proto == ICMP {
		f.Port = 0
	}
	f.HostLocal = r.IntN(8) == 0
	if len(nets) > 0 && r.IntN(2) == 0 {
		pfx := nets[r.IntN(len(nets))]
		// A random address inside the prefix: host bits random.
		b := pfx.Addr().AsSlice()
		for i := pfx.Bits(); i < len(b)*8; i++ {
			b[i/8] |= byte(r.IntN(2)) << (7 - i%8)
		}
		a, _ := netip.AddrFromSlice(b)
		if r.IntN(4) == 0 && a.Is4() {
			a = netip.AddrFrom16(a.As16()) // mapped spelling
		}
		f.IP = a
	} else if r.IntN(2) == 0 {
		f.IP = netip.AddrFrom4([4]byte{byte(r.IntN(256)), byte(r.IntN(256)), 1, 2})
	}
	for range r.IntN(3) {
		switch {
		case len(hosts) > 0 && r.IntN(3) > 0:
			h := hosts[r.IntN(len(hosts))]
			switch r.IntN(4) {
			case 0:
				h = randomLabel(r) + "." + h
			case 1:
				h = strings.ToUpper(h) + "."
			case 2:
				h = "x" + h // suffix over-match attempt
			}
			f.Names = append(f.Names, h)
		default:
			f.Names = append(f.Names, randomLabel(r)+".example")
		}
	}
	if f.Proto == TCP && r.IntN(3) == 0 {
		f.Method = []string{"GET", "POST", "PUT", "DELETE", "PATCH", "get"}[r.IntN(6)]
	}
	return f
}

func TestAllowsName(t *testing.T) {
	m := mustCompile(t, "deny tcp bad.corp.test\nallow udp *.corp.test:53\nallow tcp db.internal:5432\nallow any 10.0.0.0/8\ndefault allow\n")
	for name, want := range map[string]bool{
		"db.internal":      true,  // named, whatever the port
		"x.db.internal":    true,  // apex rules cover subdomains
		"a.corp.test":      true,  // wildcard
		"corp.test":        false, // wildcard skips the apex
		"bad.corp.test":    false, // the first rule naming it denies
		"other.test":       false, // only the default or any would allow it
		"10.0.0.1":         false, // not a name
		"DB.INTERNAL.":     true,
		"bad..corp.test":   false,
		"x.bad.corp.test":  false,
		"notdb.internal":   false,
		"db.internal.evil": false,
	} {
		if got := m.AllowsName(name); got != want {
			t.Errorf("AllowsName(%q) = %v", name, got)
		}
	}
}

// TestHostServicesNeedANamedRule: with "default allow" or an any rule, the
// VM must still not reach the host's own services (its loopback in any
// spelling, or its interface addresses); only a rule naming the address or
// the host does.
func TestHostServicesNeedANamedRule(t *testing.T) {
	local := func(f Flow) Flow { f.HostLocal = true; return f }
	for _, tc := range []struct {
		name, rules string
		flow        Flow
		want        Action
		origin      string
	}{
		{"default allow to loopback", "default allow\n", tcp(22, "127.0.0.1"), Deny, OriginHostLocal},
		{"mapped loopback", "default allow\n", tcp(22, "::ffff:127.0.0.1"), Deny, OriginHostLocal},
		{"v6 loopback", "default allow\n", tcp(22, "::1"), Deny, OriginHostLocal},
		{"whole 127/8", "default allow\n", tcp(22, "127.3.2.1"), Deny, OriginHostLocal},
		{"any rule to the host's LAN address", "allow tcp any:5432\ndefault deny\n", local(tcp(5432, "192.168.1.5")), Deny, OriginHostLocal},
		{"any web rule to the host", "allow web any\n", local(tcp(443, "192.168.1.5")), Deny, OriginHostLocal},
		{"icmp to the host", "default allow\n", local(Flow{Proto: ICMP, IP: netip.MustParseAddr("192.168.1.5")}), Deny, OriginHostLocal},
		{"named address", "allow tcp 192.168.1.5:3000\ndefault deny\n", local(tcp(3000, "192.168.1.5")), Allow, OriginRules},
		{"named prefix", "allow tcp 192.168.1.0/24\ndefault deny\n", local(tcp(3000, "192.168.1.5")), Allow, OriginRules},
		{"named host", "allow web devbox.test\ndefault deny\n", local(tcp(443, "192.168.1.5", "devbox.test")), Intercept, OriginRules},
		{"named loopback", "allow tcp 127.0.0.1:8080\n", tcp(8080, "127.0.0.1"), Allow, OriginRules},
		{"a /0 does not name the host", "allow tcp 0.0.0.0/0:5432\n", local(tcp(5432, "192.168.1.5")), Deny, OriginHostLocal},
		{"a wildcard does not name the host", "allow tcp *.example.test\n", local(tcp(5432, "192.168.1.5", "db.example.test")), Deny, OriginHostLocal},
		{"NAT64 spelling of loopback", "default allow\n", tcp(22, "64:ff9b::7f00:1"), Deny, OriginHostLocal},
		{"a deny stays the rule's", "deny tcp any:22\n", tcp(22, "127.0.0.1"), Deny, OriginRules},
		{"not the host", "default allow\n", tcp(22, "192.0.2.1"), Allow, OriginDefault},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v := mustCompile(t, tc.rules).Verdict(tc.flow)
			if v.Action != tc.want || v.Rule.Origin != tc.origin {
				t.Fatalf("got %v by %+v, want %v by %s", v.Action, v.Rule, tc.want, tc.origin)
			}
		})
	}
}

func TestActiveChangedFiresOnSwap(t *testing.T) {
	a := NewActive(mustCompile(t, "default allow\n"))
	ch := a.Changed()
	select {
	case <-ch:
		t.Fatal("changed before any swap")
	default:
	}
	a.Swap(mustCompile(t, "default deny\n"))
	select {
	case <-ch:
	default:
		t.Fatal("a swap did not signal")
	}
	if next := a.Changed(); next == ch {
		t.Fatal("the next change shares the old channel")
	}
	if a.Load().Verdict(tcp(443, "192.0.2.1")).Action != Deny {
		t.Fatal("the swapped matcher is not in force")
	}
}
