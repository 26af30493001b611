package firewall

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"

	"guard/rules"
)

// Exemption is a rule the policy carries besides the user's: placed before
// them, such as the local-inference allowance, so that no user rule can
// shadow it, or after them (Last), such as the refusal of QUIC, so that
// any user rule can.
type Exemption struct {
	Rule rules.Rule
	// Origin names where the rule comes from, e.g. "localInference".
	Origin string
	// Last places the rule after the user's rules, before the default.
	Last bool
}

// compiledRule is a rule with what a decision needs precomputed.
type compiledRule struct {
	action  rules.Action
	proto   rules.Proto
	ports   rules.PortSet
	methods []string // nil: no list
	named   bool     // the target is not any
	ref     RuleRef
}

// Matcher is a compiled policy. It is immutable and safe for concurrent use.
type Matcher struct {
	policy     *rules.Policy
	exemptions []Exemption
	rules      []compiledRule

	// Each rule is in exactly one index; the slices hold rule indexes in
	// ascending (first-match) order.
	domains    map[string][]int32 // apex and subdomains
	subdomains map[string][]int32 // strict subdomains
	v4, v6     ipTrie
	// Any-target rules are split by port so that many "deny udp any:53"
	// style rules do not make every decision scan them all.
	anyByPort map[uint16][]int32 // rules naming a few ports
	anyTarget []int32            // rules with no ports or wide ranges

	defaultAction Action
	defaultRef    RuleRef
}

// Compile builds a Matcher for p, with the exemptions placed first in the
// order given. p is retained and must not be modified afterwards.
func Compile(p *rules.Policy, exemptions ...Exemption) *Matcher {
	m := &Matcher{
		policy:     p,
		exemptions: exemptions,
		domains:    map[string][]int32{},
		subdomains: map[string][]int32{},
		anyByPort:  map[uint16][]int32{},
		defaultRef: RuleRef{Line: p.DefaultLine, Text: "default " + p.Default.String(), Origin: OriginDefault},
	}
	m.defaultAction = Allow
	if p.Default == rules.Deny {
		m.defaultAction = Deny
	}
	m.rules = make([]compiledRule, 0, len(exemptions)+len(p.Rules))
	for _, e := range exemptions {
		if !e.Last {
			m.add(&e.Rule, RuleRef{Line: e.Rule.Line, Text: rules.FormatRule(&e.Rule), Origin: e.Origin})
		}
	}
	for i := range p.Rules {
		r := &p.Rules[i]
		m.add(r, RuleRef{Line: r.Line, Text: rules.FormatRule(r), Origin: OriginRules})
	}
	for _, e := range exemptions {
		if e.Last {
			m.add(&e.Rule, RuleRef{Line: e.Rule.Line, Text: rules.FormatRule(&e.Rule), Origin: e.Origin})
		}
	}
	return m
}

func (m *Matcher) add(r *rules.Rule, ref RuleRef) {
	idx := int32(len(m.rules))
	m.rules = append(m.rules, compiledRule{action: r.Action, proto: r.Proto, ports: r.Ports, methods: r.Methods,
		named: namesTheHost(r.Target), ref: ref})
	switch t := r.Target; t.Kind {
	case rules.Domain:
		m.domains[t.Host] = append(m.domains[t.Host], idx)
	case rules.Subdomains:
		m.subdomains[t.Host] = append(m.subdomains[t.Host], idx)
	case rules.Prefix:
		if t.Prefix.Addr().Is4() {
			m.v4.insert(t.Prefix, idx)
		} else {
			m.v6.insert(t.Prefix, idx)
		}
	default:
		if n := portCount(r.Ports); n == 0 || n > maxExpandedPorts {
			m.anyTarget = append(m.anyTarget, idx)
			return
		}
		for _, pr := range r.Ports {
			for p := uint32(pr.Lo); p <= uint32(pr.Hi); p++ {
				m.anyByPort[uint16(p)] = append(m.anyByPort[uint16(p)], idx)
			}
		}
	}
}

// maxExpandedPorts bounds how many ports an any-target rule may name and
// still be indexed port by port.
const maxExpandedPorts = 64

func portCount(s rules.PortSet) int {
	n := 0
	for _, r := range s {
		n += int(r.Hi-r.Lo) + 1
	}
	return n
}

// Policy returns the policy the matcher was compiled from.
func (m *Matcher) Policy() *rules.Policy { return m.policy }

// Exemptions returns the rules placed before the policy's own.
func (m *Matcher) Exemptions() []Exemption { return m.exemptions }

// Verdict decides a flow. At the connection layer (Method empty) a web rule
// gives Intercept, except a deny web rule without methods, which denies. For
// a web request (Method set) the result is Allow or Deny for that method.
func (m *Matcher) Verdict(f Flow) Verdict {
	if (f.Proto == TCP || f.Proto == UDP) && f.Port == 0 {
		return Verdict{Action: Deny, Rule: RuleRef{Origin: OriginInvalidFlow, Text: "port 0"}}
	}
	if f.Method != "" && !rules.IsToken(f.Method) {
		return Verdict{Action: Deny, Rule: RuleRef{Origin: OriginInvalidFlow, Text: fmt.Sprintf("%q is not an HTTP method", f.Method)}}
	}
	s := search{m: m, flow: &f, best: int32(len(m.rules))}
	if f.IP.IsValid() {
		s.ip(CanonicalIP(f.IP))
	}
	for _, n := range f.Names {
		if n == "" {
			continue
		}
		name, ip, ok := canonicalName(n)
		switch {
		case !ok:
			// A name that cannot be a DNS name cannot be matched, and
			// ignoring it would let it slip past deny-by-name rules.
			return Verdict{Action: Deny, Rule: RuleRef{Origin: OriginInvalidName, Text: fmt.Sprintf("%q is not a valid host name", n)}}
		case ip.IsValid():
			s.ip(ip)
		default:
			s.name(name)
		}
	}
	if l, ok := m.anyByPort[f.Port]; ok && f.Proto != ICMP {
		s.list(l)
	}
	s.list(m.anyTarget)
	var v Verdict
	if s.best == int32(len(m.rules)) {
		v = Verdict{Action: m.defaultAction, Rule: m.defaultRef}
	} else {
		r := &m.rules[s.best]
		v = Verdict{Action: r.decide(f.Method), Rule: r.ref, Named: r.named}
	}
	if v.Action != Deny && !v.Named && f.toHost() {
		return Verdict{Action: Deny, Rule: RuleRef{Origin: OriginHostLocal, Text: "the host's own services need a rule that names their address"}}
	}
	return v
}

// toHost says the flow's destination is the host running guard.
func (f *Flow) toHost() bool {
	ip := CanonicalIP(f.IP)
	if v4, ok := EmbeddedIPv4(ip); ok {
		ip = v4
	}
	return f.HostLocal || ip.IsLoopback()
}

// namesTheHost says a rule's target is specific enough to open the host's
// own services: an address, a prefix other than /0, or a host with its
// subdomains. any, /0 and *.wildcards (whose names the agent may control
// through DNS) are not.
func namesTheHost(t rules.Target) bool {
	switch t.Kind {
	case rules.AnyTarget, rules.Subdomains:
		return false
	case rules.Prefix:
		return t.Prefix.Bits() > 0
	}
	return true
}

// search finds the lowest-numbered matching rule across the indexes.
type search struct {
	m    *Matcher
	flow *Flow
	best int32
}

// list scans one index list; it stops at the first match or once the
// indexes pass the best match so far, since lists are ascending.
func (s *search) list(idx []int32) {
	for _, i := range idx {
		if i >= s.best {
			return
		}
		if s.m.rules[i].applies(s.flow) {
			s.best = i
			return
		}
	}
}

func (s *search) ip(a netip.Addr) {
	if v4, ok := EmbeddedIPv4(a); ok {
		s.ip(v4)
	}
	if a.Is4() {
		s.m.v4.walk(keyOf(a), 32, s)
		return
	}
	s.m.v6.walk(keyOf(a), 128, s)
}

// name walks the suffixes of a name at label boundaries: "a.b.c" tries the
// domain rules for a.b.c, b.c and c, and the subdomain rules for b.c and c.
func (s *search) name(n string) {
	if l, ok := s.m.domains[n]; ok {
		s.list(l)
	}
	for rest := n; ; {
		i := strings.IndexByte(rest, '.')
		if i < 0 {
			return
		}
		rest = rest[i+1:]
		if l, ok := s.m.domains[rest]; ok {
			s.list(l)
		}
		if l, ok := s.m.subdomains[rest]; ok {
			s.list(l)
		}
	}
}

// applies reports whether the rule's protocol and ports admit the flow; the
// target was matched by the index that led here.
func (r *compiledRule) applies(f *Flow) bool {
	switch r.proto {
	case rules.TCP, rules.Web:
		if f.Proto != TCP {
			return false
		}
	case rules.UDP:
		if f.Proto != UDP {
			return false
		}
	}
	if len(r.ports) == 0 {
		return true
	}
	// A flow without ports (ICMP) cannot match a rule that names ports.
	return f.Proto != ICMP && r.ports.Contains(f.Port)
}

// decide turns a matched rule into an action for a connection (method "")
// or a request.
func (r *compiledRule) decide(method string) Action {
	if r.proto != rules.Web {
		if r.action == rules.Allow {
			return Allow
		}
		return Deny
	}
	if method == "" {
		if r.action == rules.Deny && r.methods == nil {
			return Deny
		}
		return Intercept
	}
	if r.methods == nil {
		if r.action == rules.Allow {
			return Allow
		}
		return Deny
	}
	listed := slices.Contains(r.methods, upperASCII(method))
	if listed == (r.action == rules.Allow) {
		return Allow
	}
	return Deny
}

// upperASCII upper-cases ASCII letters only (strings.ToUpper would fold
// "poſt" into "POST"), without allocating when s already is upper case.
func upperASCII(s string) string {
	for i := 0; i < len(s); i++ {
		if 'a' <= s[i] && s[i] <= 'z' {
			b := []byte(s)
			for j := i; j < len(b); j++ {
				if 'a' <= b[j] && b[j] <= 'z' {
					b[j] -= 'a' - 'A'
				}
			}
			return string(b)
		}
	}
	return s
}

// AllowsName reports whether the first rule that names host (by domain or
// subdomain pattern, whatever its protocol and ports) allows it: the
// operator's explicit say-so for a name, as the DNS gateway needs before it
// lets a name resolve to an internal address.
func (m *Matcher) AllowsName(host string) bool {
	name, ip, ok := canonicalName(host)
	if !ok || ip.IsValid() {
		return false
	}
	best := int32(-1)
	take := func(l []int32) {
		if len(l) > 0 && (best < 0 || l[0] < best) {
			best = l[0]
		}
	}
	take(m.domains[name])
	for rest := name; ; {
		i := strings.IndexByte(rest, '.')
		if i < 0 {
			break
		}
		rest = rest[i+1:]
		take(m.domains[rest])
		take(m.subdomains[rest])
	}
	return best >= 0 && m.rules[best].action == rules.Allow
}
