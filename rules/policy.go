package rules

import (
	"net/netip"
	"slices"
)

// Action is what a rule does with the flows it matches.
type Action uint8

const (
	Allow Action = iota + 1
	Deny
)

func (a Action) String() string {
	switch a {
	case Allow:
		return "allow"
	case Deny:
		return "deny"
	}
	return "invalid"
}

// Proto is the protocol a rule applies to.
type Proto uint8

const (
	// Any matches every protocol.
	Any Proto = iota + 1
	TCP
	UDP
	// Web is HTTP(S) over TCP. A web rule forces interception so that its
	// method list can be applied per request.
	Web
)

func (p Proto) String() string {
	switch p {
	case Any:
		return "any"
	case TCP:
		return "tcp"
	case UDP:
		return "udp"
	case Web:
		return "web"
	}
	return "invalid"
}

// TargetKind says how a Target matches.
type TargetKind uint8

const (
	// AnyTarget matches every destination.
	AnyTarget TargetKind = iota + 1
	// Domain matches a host and every subdomain of it ("example.com").
	Domain
	// Subdomains matches strict subdomains only ("*.example.com").
	Subdomains
	// Prefix matches an IP address or CIDR. A single address is a prefix of
	// full length.
	Prefix
)

// Target is the destination part of a rule.
type Target struct {
	Kind TargetKind
	// Host is the lower-case ASCII (punycode) name, without a trailing dot
	// and without the "*." of a Subdomains target.
	Host string
	// Prefix is set for Kind == Prefix. IPv4-mapped IPv6 prefixes are stored
	// as IPv4.
	Prefix netip.Prefix
}

// PortRange is an inclusive range of ports; a single port has Lo == Hi.
type PortRange struct {
	Lo, Hi uint16
}

// PortSet is a sorted list of disjoint, non-adjacent ranges. The empty set
// means every port.
type PortSet []PortRange

// Contains reports whether port is in the set. An empty set contains every
// port.
func (s PortSet) Contains(port uint16) bool {
	if len(s) == 0 {
		return true
	}
	// Sets are short in practice; a binary search keeps long ones cheap.
	lo, hi := 0, len(s)
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		switch {
		case port < s[m].Lo:
			hi = m
		case port > s[m].Hi:
			lo = m + 1
		default:
			return true
		}
	}
	return false
}

// Rule is one parsed rule line.
type Rule struct {
	// Line is the 1-based line number in the source text; 0 for rules that
	// did not come from a file.
	Line   int
	Action Action
	Proto  Proto
	Target Target
	Ports  PortSet
	// Methods is the sorted, upper-case method list of a web rule. Nil means
	// no list: an allow web rule passes every method, a deny web rule denies
	// the connection.
	Methods []string
}

// Policy is a parsed rules file.
type Policy struct {
	Rules []Rule
	// Default applies when no rule matches. It is Allow when the file has no
	// default line.
	Default Action
	// DefaultLine is the line of the default statement, 0 when absent.
	DefaultLine int
}

// Equal reports whether two rules mean the same thing. Line numbers are
// ignored.
func (r Rule) Equal(o Rule) bool {
	return r.Action == o.Action && r.Proto == o.Proto &&
		r.Target == o.Target &&
		slices.Equal(r.Ports, o.Ports) &&
		(r.Methods == nil) == (o.Methods == nil) &&
		slices.Equal(r.Methods, o.Methods)
}

// Equal reports whether two policies mean the same thing: the same rules in
// the same order and the same default. Line numbers are ignored.
func (p *Policy) Equal(o *Policy) bool {
	if p.Default != o.Default || len(p.Rules) != len(o.Rules) {
		return false
	}
	for i := range p.Rules {
		if !p.Rules[i].Equal(o.Rules[i]) {
			return false
		}
	}
	return true
}

// readOnlyMethods returns what the read-only keyword expands to, sorted.
func readOnlyMethods() []string { return []string{"GET", "HEAD", "OPTIONS"} }

// isReadOnly reports whether a method list is exactly the read-only set.
func isReadOnly(methods []string) bool {
	return slices.Equal(methods, readOnlyMethods())
}
