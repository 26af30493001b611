package firewall

import (
	"fmt"
	"net/netip"
	"strings"

	"guard/rules"
)

// Proto is a flow's transport protocol.
type Proto uint8

const (
	TCP Proto = iota + 1
	UDP
	ICMP
)

func (p Proto) String() string {
	switch p {
	case TCP:
		return "tcp"
	case UDP:
		return "udp"
	case ICMP:
		return "icmp"
	}
	return "invalid"
}

// ParseProto parses "tcp", "udp" or "icmp".
func ParseProto(s string) (Proto, error) {
	switch strings.ToLower(s) {
	case "tcp":
		return TCP, nil
	case "udp":
		return UDP, nil
	case "icmp":
		return ICMP, nil
	}
	return 0, fmt.Errorf("unknown protocol %q (want tcp or udp)", s)
}

// Flow is what is known about a connection, or a request on one, when it is
// decided.
type Flow struct {
	Proto Proto
	// IP is the destination address; the zero Addr when unknown (a request
	// through the explicit proxy that has not been resolved yet).
	IP netip.Addr
	// Names are candidate host names for the destination: DNS-snooped names
	// at the connection layer, SNI and Host above it. They may be in any
	// case, with a trailing dot, or internationalized.
	Names []string
	// Port is the destination port; 0 for ICMP.
	Port uint16
	// Method is the HTTP method of a web request; empty at the connection
	// layer.
	Method string
	// HostLocal says IP is one of the host's own addresses (other than
	// loopback, which is known from the address alone). Only the I/O layer
	// can tell, so it sets this.
	HostLocal bool
}

// Action is the outcome of a decision.
type Action uint8

const (
	Allow Action = iota + 1
	Deny
	// Intercept lets the flow through the HTTP proxy only, which applies a
	// web rule's methods to each request.
	Intercept
)

func (a Action) String() string {
	switch a {
	case Allow:
		return "allow"
	case Deny:
		return "deny"
	case Intercept:
		return "intercept"
	}
	return "invalid"
}

// Origins of a decisive rule.
const (
	OriginRules   = "rules"   // a line of the rules file
	OriginDefault = "default" // the policy's default
	// OriginInvalidName: a candidate name was not a host name, and the flow
	// was denied before any rule was tried.
	OriginInvalidName = "invalidName"
	// OriginInvalidFlow: the flow itself is malformed (port 0, a method
	// that is not an HTTP token) and was denied before any rule was tried.
	OriginInvalidFlow = "invalidFlow"
	// OriginHostLocal: the destination is the host itself (loopback or one
	// of its own addresses) and the deciding rule did not name it: any and
	// the default never reach the host's services.
	OriginHostLocal = "hostLocal"
)

// RuleRef names the rule that decided: its line, its canonical text and
// where it came from (OriginRules, OriginDefault, or an exemption's origin
// such as "localInference").
type RuleRef struct {
	Line   int    `json:"line"`
	Text   string `json:"text"`
	Origin string `json:"origin"`
}

func (r RuleRef) String() string {
	switch {
	case r.Origin == OriginDefault:
		return r.Text
	case r.Origin == OriginRules:
		return fmt.Sprintf("line %d: %s", r.Line, r.Text)
	}
	return fmt.Sprintf("%s: %s", r.Origin, r.Text)
}

// Verdict is a decision and the rule that made it.
type Verdict struct {
	Action Action
	Rule   RuleRef
	// Named is set when the deciding rule names its target (a host, a
	// subdomain pattern or an address), rather than any or the default.
	// Some destinations, such as the host's own loopback, are reachable
	// only by a rule that names them.
	Named bool
}

// Default reports whether no rule matched and the policy default decided.
func (v Verdict) Default() bool { return v.Rule.Origin == OriginDefault }

// restrictiveness orders actions: deny over intercept over allow.
func restrictiveness(a Action) int {
	switch a {
	case Allow:
		return 0
	case Intercept:
		return 1
	}
	return 2
}

// Stricter returns the more restrictive of two verdicts for the same flow,
// the earlier one on a tie. A flow is decided again as it reveals more (SNI,
// then Host and method), and the names it reveals are the VM's to choose: a
// later layer may tighten the verdict a flow already has, never loosen it.
func Stricter(earlier, later Verdict) Verdict {
	if restrictiveness(later.Action) > restrictiveness(earlier.Action) {
		return later
	}
	return earlier
}

// nat64 is the well-known NAT64 prefix (RFC 6052); addresses in it embed an
// IPv4 address in their last 32 bits.
func nat64() netip.Prefix {
	return netip.PrefixFrom(netip.AddrFrom16([16]byte{0: 0x00, 1: 0x64, 2: 0xff, 3: 0x9b}), 96)
}

// CanonicalIP returns the address as rules see it: IPv4-mapped IPv6 becomes
// the IPv4 address it carries, and any zone is dropped.
func CanonicalIP(a netip.Addr) netip.Addr {
	if !a.IsValid() {
		return a
	}
	return a.WithZone("").Unmap()
}

// EmbeddedIPv4 returns the IPv4 address inside a NAT64 well-known-prefix
// address. Such a flow is IPv6 on the wire but reaches that IPv4 host
// through the host's NAT64, so rules for either spelling apply to it.
func EmbeddedIPv4(a netip.Addr) (netip.Addr, bool) {
	if !a.Is6() || a.Is4In6() || !nat64().Contains(a.WithZone("")) {
		return netip.Addr{}, false
	}
	b := a.As16()
	return netip.AddrFrom4([4]byte{b[12], b[13], b[14], b[15]}), true
}

// canonicalName returns the matching form of a candidate name, or, when the
// name is an IP literal (possibly bracketed), that address. ok is false for
// names that are not host names.
func canonicalName(s string) (name string, ip netip.Addr, ok bool) {
	if s == "" {
		return "", netip.Addr{}, false
	}
	if c := s[0]; c == '[' || ('0' <= c && c <= '9') || strings.IndexByte(s, ':') >= 0 {
		if a, err := netip.ParseAddr(strings.TrimSuffix(strings.TrimPrefix(s, "["), "]")); err == nil {
			return "", CanonicalIP(a), true
		}
	}
	if rules.IsCanonicalHost(s) {
		return s, netip.Addr{}, true
	}
	n, err := rules.NormalizeHost(s)
	if err != nil {
		return "", netip.Addr{}, false
	}
	return n, netip.Addr{}, true
}
