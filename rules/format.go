package rules

import (
	"strconv"
	"strings"
)

// Format prints a policy in canonical form: one rule per line in order,
// keywords in lower case, the protocol always written, hosts in punycode,
// ports sorted and merged, methods sorted, and the default last. Comments and
// blank lines are not kept.
func Format(p *Policy) string {
	var b strings.Builder
	for i := range p.Rules {
		b.WriteString(FormatRule(&p.Rules[i]))
		b.WriteByte('\n')
	}
	b.WriteString("default ")
	b.WriteString(p.Default.String())
	b.WriteByte('\n')
	return b.String()
}

// FormatRule prints one rule in canonical form, without its line number.
func FormatRule(r *Rule) string {
	var b strings.Builder
	b.WriteString(r.Action.String())
	b.WriteByte(' ')
	b.WriteString(r.Proto.String())
	b.WriteByte(' ')
	b.WriteString(FormatTarget(r.Target, r.Ports))
	if r.Methods != nil {
		b.WriteByte(' ')
		if isReadOnly(r.Methods) {
			b.WriteString("read-only")
		} else {
			b.WriteString(strings.Join(r.Methods, ","))
		}
	}
	return b.String()
}

// FormatTarget prints a target with its ports, bracketing IPv6 when ports
// follow.
func FormatTarget(t Target, ports PortSet) string {
	var host string
	ipv6 := false
	switch t.Kind {
	case AnyTarget:
		host = "any"
	case Domain:
		host = t.Host
	case Subdomains:
		host = "*." + t.Host
	case Prefix:
		ipv6 = t.Prefix.Addr().Is6()
		if t.Prefix.IsSingleIP() {
			host = t.Prefix.Addr().String()
		} else {
			host = t.Prefix.String()
		}
	default:
		host = "invalid"
	}
	if len(ports) == 0 {
		return host
	}
	if ipv6 {
		host = "[" + host + "]"
	}
	return host + ":" + FormatPorts(ports)
}

// FormatPorts prints a port set as a comma list; the empty set is "any".
func FormatPorts(s PortSet) string {
	if len(s) == 0 {
		return "any"
	}
	var b strings.Builder
	for i, r := range s {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(strconv.Itoa(int(r.Lo)))
		if r.Hi != r.Lo {
			b.WriteByte('-')
			b.WriteString(strconv.Itoa(int(r.Hi)))
		}
	}
	return b.String()
}
