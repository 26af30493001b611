package rules

import (
	"bytes"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"
)

// MaxLineBytes is the longest rule line accepted. Real rules are short; the
// limit keeps a pasted blob from turning into a megabyte error message.
const MaxLineBytes = 4096

// maxReportedErrors caps the errors kept for one file. A binary file fed to
// the parser would otherwise produce one error per byte run.
const maxReportedErrors = 200

// LineError is one bad line.
type LineError struct {
	Line int
	Msg  string
}

func (e *LineError) Error() string { return fmt.Sprintf("Line %d: %s", e.Line, e.Msg) }

// ParseError lists every bad line of a rules file, in line order.
type ParseError struct {
	Errors []*LineError
	// Omitted counts bad lines beyond the reporting cap.
	Omitted int
}

func (e *ParseError) Error() string {
	var b strings.Builder
	for i, le := range e.Errors {
		if i > 0 {
			b.WriteByte('\n')
		}
		b.WriteString(le.Error())
	}
	if e.Omitted > 0 {
		fmt.Fprintf(&b, "\n… and %d more bad lines", e.Omitted)
	}
	return b.String()
}

// Lines returns each error as its "Line N: message" text.
func (e *ParseError) Lines() []string {
	out := make([]string, 0, len(e.Errors)+1)
	for _, le := range e.Errors {
		out = append(out, le.Error())
	}
	if e.Omitted > 0 {
		out = append(out, fmt.Sprintf("… and %d more bad lines", e.Omitted))
	}
	return out
}

// ParseString parses rules text. See Parse.
func ParseString(src string) (*Policy, error) { return Parse([]byte(src)) }

// Parse parses a rules file. On any bad line it returns a *ParseError that
// lists every bad line, and no policy.
func Parse(src []byte) (*Policy, error) {
	src = bytes.TrimPrefix(src, []byte("\xef\xbb\xbf")) // UTF-8 byte order mark
	p := &Policy{Default: Allow}
	perr := &ParseError{}
	fail := func(line int, err error) {
		if len(perr.Errors) >= maxReportedErrors {
			perr.Omitted++
			return
		}
		perr.Errors = append(perr.Errors, &LineError{Line: line, Msg: err.Error()})
	}
	n := 0
	for len(src) > 0 || n == 0 {
		n++
		var raw []byte
		if i := bytes.IndexByte(src, '\n'); i >= 0 {
			raw, src = src[:i], src[i+1:]
		} else {
			raw, src = src, nil
		}
		raw = bytes.TrimSuffix(raw, []byte("\r"))
		if len(raw) > MaxLineBytes {
			fail(n, fmt.Errorf("line is %d bytes long (limit %d)", len(raw), MaxLineBytes))
			continue
		}
		r, def, err := parseLine(string(raw))
		switch {
		case err != nil:
			fail(n, err)
		case def != 0:
			if p.DefaultLine != 0 {
				fail(n, fmt.Errorf("second default (the first is on line %d)", p.DefaultLine))
				continue
			}
			p.Default, p.DefaultLine = def, n
		case r != nil:
			// The canonical form can be longer than the source (read-only
			// expands, the protocol is always written); it must parse too.
			if l := len(FormatRule(r)); l > MaxLineBytes {
				fail(n, fmt.Errorf("rule is %d bytes long in canonical form (limit %d)", l, MaxLineBytes))
				continue
			}
			r.Line = n
			p.Rules = append(p.Rules, *r)
		}
	}
	if len(perr.Errors) > 0 {
		return nil, perr
	}
	return p, nil
}

// parseLine parses one line. It returns a rule, a default action, or
// neither for a blank or comment line.
func parseLine(line string) (*Rule, Action, error) {
	if i := strings.IndexByte(line, '#'); i >= 0 {
		line = line[:i]
	}
	if err := checkText(line); err != nil {
		return nil, 0, err
	}
	tok := strings.Fields(line)
	if len(tok) == 0 {
		return nil, 0, nil
	}
	switch strings.ToLower(tok[0]) {
	case "default":
		a, err := parseDefault(tok[1:])
		return nil, a, err
	case "allow":
		r, err := parseRule(Allow, tok[1:])
		return r, 0, err
	case "deny":
		r, err := parseRule(Deny, tok[1:])
		return r, 0, err
	}
	return nil, 0, fmt.Errorf("unknown action %s (want allow, deny or default)", quote(tok[0]))
}

// checkText rejects bytes that have no business in a rules file, naming the
// column so that invisible characters can be found.
func checkText(s string) error {
	for i, r := range s {
		if r == utf8.RuneError {
			if _, size := utf8.DecodeRuneInString(s[i:]); size == 1 {
				return fmt.Errorf("invalid UTF-8 byte 0x%02x at column %d", s[i], i+1)
			}
		}
		if (r < 0x20 && r != '\t') || r == 0x7f {
			return fmt.Errorf("control character U+%04X at column %d", r, i+1)
		}
	}
	return nil
}

func parseDefault(args []string) (Action, error) {
	if len(args) == 0 {
		return 0, errors.New("default needs allow or deny")
	}
	if len(args) > 1 {
		return 0, fmt.Errorf("unexpected %s after default %s", quote(args[1]), args[0])
	}
	switch strings.ToLower(args[0]) {
	case "allow":
		return Allow, nil
	case "deny":
		return Deny, nil
	}
	return 0, fmt.Errorf("unknown default %s (want allow or deny)", quote(args[0]))
}

func parseProto(s string) (Proto, bool) {
	switch strings.ToLower(s) {
	case "any":
		return Any, true
	case "tcp":
		return TCP, true
	case "udp":
		return UDP, true
	case "web":
		return Web, true
	}
	return 0, false
}

func parseRule(action Action, args []string) (*Rule, error) {
	if len(args) == 0 {
		return nil, fmt.Errorf("missing target after %s", action)
	}
	r := &Rule{Action: action, Proto: Any}
	if proto, ok := parseProto(args[0]); ok {
		switch {
		case len(args) > 1:
			r.Proto, args = proto, args[1:]
		case proto != Any:
			// "any" alone is the any-target; "allow tcp" alone is a mistake.
			return nil, fmt.Errorf("missing target after protocol %s", proto)
		}
	} else if len(args) > 1 && isBareWord(args[0]) {
		return nil, fmt.Errorf("unknown protocol %s (want tcp, udp, web or any)", quote(args[0]))
	}
	target, ports, err := parseTarget(args[0])
	if err != nil {
		return nil, err
	}
	r.Target, r.Ports = target, ports
	if rest := args[1:]; len(rest) > 0 {
		if r.Proto != Web {
			return nil, fmt.Errorf("unexpected %s after the target: method lists are only allowed on web rules (this rule is %s)", quote(rest[0]), r.Proto)
		}
		if r.Methods, err = parseMethods(rest); err != nil {
			return nil, err
		}
	}
	return r, nil
}

// isBareWord reports whether s is letters only, the shape of a protocol
// keyword rather than a target.
func isBareWord(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i] | 0x20
		if c < 'a' || c > 'z' {
			return false
		}
	}
	return s != ""
}

// parseTarget parses "target[:ports]".
func parseTarget(tok string) (Target, PortSet, error) {
	var hostPart, portPart string
	hasPorts := false
	switch {
	case strings.HasPrefix(tok, "["):
		end := strings.IndexByte(tok, ']')
		if end < 0 {
			return Target{}, nil, fmt.Errorf("missing ']' in %s", quote(tok))
		}
		hostPart = tok[1:end]
		switch after := tok[end+1:]; {
		case after == "":
		case after[0] == ':':
			portPart, hasPorts = after[1:], true
		default:
			return Target{}, nil, fmt.Errorf("unexpected %s after ']' in %s (want :ports)", quote(after), quote(tok))
		}
		t, err := parseBracketed(hostPart)
		if err != nil {
			return Target{}, nil, err
		}
		ports, err := parsePortsPart(portPart, hasPorts, tok)
		return t, ports, err
	case strings.Count(tok, ":") >= 2:
		// An unbracketed IPv6 address or CIDR never carries ports.
		t, err := parseIPTarget(tok)
		if errors.Is(err, errBadAddr) {
			return Target{}, nil, fmt.Errorf("%w (an IPv6 target with ports needs brackets: [2001:db8::1]:443)", err)
		}
		return t, nil, err
	default:
		hostPart = tok
		if i := strings.IndexByte(tok, ':'); i >= 0 {
			hostPart, portPart, hasPorts = tok[:i], tok[i+1:], true
		}
	}
	if hostPart == "" {
		return Target{}, nil, fmt.Errorf("missing target before ':' in %s", quote(tok))
	}
	t, err := parseHostTarget(hostPart)
	if err != nil {
		return Target{}, nil, err
	}
	ports, err := parsePortsPart(portPart, hasPorts, tok)
	return t, ports, err
}

func parsePortsPart(s string, present bool, tok string) (PortSet, error) {
	if !present {
		return nil, nil
	}
	if s == "" {
		return nil, fmt.Errorf("missing ports after ':' in %s", quote(tok))
	}
	return parsePorts(s)
}

func parseBracketed(s string) (Target, error) {
	if !strings.Contains(s, ":") {
		return Target{}, fmt.Errorf("brackets are only for IPv6 addresses, not %s", quote("["+s+"]"))
	}
	return parseIPTarget(s)
}

func parseHostTarget(s string) (Target, error) {
	switch {
	case s == "any" || s == "*" || strings.EqualFold(s, "any"):
		return Target{Kind: AnyTarget}, nil
	case strings.Contains(s, "/") || looksNumeric(s):
		return parseIPTarget(s)
	case strings.HasPrefix(s, "*."):
		rest := s[2:]
		if strings.Contains(rest, "*") {
			return Target{}, fmt.Errorf("wildcard '*' is only allowed as the whole first label, as in *.example.com, not %s", quote(s))
		}
		h, err := NormalizeHost(rest)
		if err != nil {
			return Target{}, err
		}
		return Target{Kind: Subdomains, Host: h}, nil
	case strings.Contains(s, "*"):
		return Target{}, fmt.Errorf("wildcard '*' is only allowed as the whole first label, as in *.example.com, not %s", quote(s))
	}
	if a, err := netip.ParseAddr(s); err == nil {
		return addrTarget(a)
	}
	h, err := NormalizeHost(s)
	if err != nil {
		return Target{}, err
	}
	switch h {
	case "any":
		// "any." or a full-width "ａｎｙ" would print as the keyword and
		// come back as every destination.
		return Target{}, fmt.Errorf("%s is the keyword any; a host cannot be named any", quote(s))
	case "tcp", "udp", "web":
		return Target{}, fmt.Errorf("%s is a protocol, not a host; did you mean \"%s any:ports\"?", quote(s), h)
	}
	return Target{Kind: Domain, Host: h}, nil
}

// looksNumeric reports whether s is made of digits and dots only, the shape
// of an IPv4 address.
func looksNumeric(s string) bool {
	for i := 0; i < len(s); i++ {
		if (s[i] < '0' || s[i] > '9') && s[i] != '.' {
			return false
		}
	}
	return s != ""
}

func addrTarget(a netip.Addr) (Target, error) {
	if a.Zone() != "" {
		return Target{}, fmt.Errorf("IPv6 zone %s is not allowed in a rule", quote(a.Zone()))
	}
	a = a.Unmap()
	return Target{Kind: Prefix, Prefix: netip.PrefixFrom(a, a.BitLen())}, nil
}

var errBadAddr = errors.New("invalid IP address")

// parseIPTarget parses an address or CIDR. IPv4-mapped IPv6 forms become
// IPv4, so that they match the flows they describe.
func parseIPTarget(s string) (Target, error) {
	addrText, bitsText, isCIDR := strings.Cut(s, "/")
	a, err := netip.ParseAddr(addrText)
	if err != nil {
		return Target{}, fmt.Errorf("%w %s", errBadAddr, quote(addrText))
	}
	if a.Zone() != "" {
		return Target{}, fmt.Errorf("IPv6 zone %s is not allowed in a rule", quote(a.Zone()))
	}
	if !isCIDR {
		return addrTarget(a)
	}
	bits, err := strconv.Atoi(bitsText)
	if err != nil || !allDigits(bitsText) {
		return Target{}, fmt.Errorf("invalid prefix length %s in %s", quote(bitsText), quote(s))
	}
	family, max := "IPv6", 128
	if a.Is4() {
		family, max = "IPv4", 32
	}
	if bits > max {
		return Target{}, fmt.Errorf("prefix length %d in %s out of range for %s (0-%d)", bits, quote(s), family, max)
	}
	pfx := netip.PrefixFrom(a, bits)
	if m := pfx.Masked(); m.Addr() != a {
		return Target{}, fmt.Errorf("%s has bits set past the prefix length; did you mean %s?", quote(s), m)
	}
	if a.Is4In6() && bits >= 96 {
		pfx = netip.PrefixFrom(a.Unmap(), bits-96)
	}
	return Target{Kind: Prefix, Prefix: pfx}, nil
}

// parsePorts parses a comma list of ports and lo-hi ranges, or any/*.
func parsePorts(s string) (PortSet, error) {
	if s == "any" || s == "*" || strings.EqualFold(s, "any") {
		return nil, nil
	}
	var set PortSet
	for item := range strings.SplitSeq(s, ",") {
		if item == "" {
			return nil, fmt.Errorf("empty port in list %s", quote(s))
		}
		loText, hiText, isRange := strings.Cut(item, "-")
		lo, err := parsePort(loText, item)
		if err != nil {
			return nil, err
		}
		hi := lo
		if isRange {
			if hi, err = parsePort(hiText, item); err != nil {
				return nil, err
			}
			if hi < lo {
				return nil, fmt.Errorf("port range %s is backwards (want low-high)", quote(item))
			}
		}
		set = append(set, PortRange{lo, hi})
	}
	return normalizePorts(set), nil
}

func parsePort(s, item string) (uint16, error) {
	if s == "" || !allDigits(s) {
		return 0, fmt.Errorf("invalid port %s (want a number 1-65535, a range lo-hi, or any)", quote(item))
	}
	n, err := strconv.ParseUint(s, 10, 32)
	if err != nil || n < 1 || n > 65535 {
		return 0, fmt.Errorf("port %s out of range (1-65535)", quote(s))
	}
	return uint16(n), nil
}

// normalizePorts sorts and merges ranges. A set covering every port becomes
// nil, the canonical "any".
func normalizePorts(set PortSet) PortSet {
	slices.SortFunc(set, func(a, b PortRange) int { return int(a.Lo) - int(b.Lo) })
	out := set[:0]
	for _, r := range set {
		if n := len(out); n > 0 && uint32(r.Lo) <= uint32(out[n-1].Hi)+1 {
			out[n-1].Hi = max(out[n-1].Hi, r.Hi)
			continue
		}
		out = append(out, r)
	}
	if len(out) == 1 && out[0].Lo == 1 && out[0].Hi == 65535 {
		return nil
	}
	return out
}

// parseMethods parses the method list of a web rule: comma or space
// separated, case-insensitive, with the read-only keyword and the older
// "methods A,B" form.
func parseMethods(toks []string) ([]string, error) {
	if strings.EqualFold(toks[0], "methods") {
		toks = toks[1:]
		if len(toks) == 0 {
			return nil, errors.New("the methods keyword needs a list, as in methods GET,POST")
		}
	}
	var out []string
	for _, t := range toks {
		for m := range strings.SplitSeq(t, ",") {
			switch {
			case m == "":
				continue
			case strings.EqualFold(m, "read-only"):
				out = append(out, readOnlyMethods()...)
			case !isToken(m):
				return nil, fmt.Errorf("invalid method %s (want names like GET,POST or read-only)", quote(m))
			case strings.EqualFold(m, "methods"):
				return nil, errors.New("methods is the keyword that starts a list, not a method")
			default:
				out = append(out, strings.ToUpper(m))
			}
		}
	}
	if len(out) == 0 {
		return nil, errors.New("empty method list")
	}
	slices.Sort(out)
	return slices.Compact(out), nil
}

// IsToken reports whether s is an HTTP token (RFC 9110 §5.6.2), the syntax
// of a method name.
func IsToken(s string) bool { return isToken(s) }

// isToken reports whether s is an HTTP token (RFC 9110 §5.6.2), the syntax
// of a method name.
func isToken(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' {
			continue
		}
		if !strings.ContainsRune("!$%&'*+-.^_`|~", rune(c)) {
			return false
		}
	}
	return s != ""
}
