package rules

import (
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"

	"golang.org/x/net/idna"
)

// Limits from RFC 1035 §2.3.4.
const (
	maxHostLen  = 253
	maxLabelLen = 63
)

// NormalizeHost returns the canonical form of a host name: lower case,
// punycode for internationalized labels (UTS #46 lookup mapping), one
// trailing dot removed. It rejects names that cannot be DNS host names,
// including bracketed names and anything that looks like a malformed IPv4
// address, so that a typo cannot silently become a rule that never matches.
//
// Underscores are accepted because real service names carry them.
func NormalizeHost(s string) (string, error) {
	if s == "" {
		return "", errors.New("empty host name")
	}
	if strings.HasPrefix(s, "[") || strings.HasSuffix(s, "]") {
		return "", fmt.Errorf("host %s: brackets are only for IPv6 addresses", quote(s))
	}
	h := strings.TrimSuffix(s, ".")
	if !isPlainASCIIHost(h) {
		if !utf8.ValidString(h) {
			return "", fmt.Errorf("host %s is not valid UTF-8", quote(s))
		}
		// Map (case fold, width fold, NFC) and encode to punycode, but leave
		// STD3 off so that underscores survive; the label check below does
		// the ASCII validation.
		p := idna.New(idna.MapForLookup(), idna.BidiRule(), idna.StrictDomainName(false))
		a, err := p.ToASCII(h)
		if err != nil {
			return "", fmt.Errorf("host %s is not a valid internationalized name: %w", quote(s), err)
		}
		h = strings.TrimSuffix(a, ".")
	}
	if err := checkLabels(h); err != nil {
		return "", fmt.Errorf("host %s: %w", quote(s), err)
	}
	return h, nil
}

// IsCanonicalHost reports whether s is already what NormalizeHost would
// return for it, cheaply and without allocating: the matcher's fast path.
func IsCanonicalHost(s string) bool {
	return s != "" && s[len(s)-1] != '.' && isPlainASCIIHost(s) && checkLabels(s) == nil
}

// isPlainASCIIHost reports whether h is already lower-case ASCII with no
// punycode labels, so that the IDNA pass can be skipped.
func isPlainASCIIHost(h string) bool {
	for i := 0; i < len(h); i++ {
		c := h[i]
		if c >= 0x80 || ('A' <= c && c <= 'Z') {
			return false
		}
	}
	// Punycode labels must be validated by decoding them.
	return !strings.HasPrefix(h, "xn--") && !strings.Contains(h, ".xn--")
}

func checkLabels(h string) error {
	if h == "" {
		return errors.New("empty host name")
	}
	if len(h) > maxHostLen {
		return fmt.Errorf("name is %d bytes long (limit %d)", len(h), maxHostLen)
	}
	// One pass over the bytes; this runs for every candidate name of every
	// flow.
	start := 0
	for i := 0; i <= len(h); i++ {
		if i < len(h) && h[i] != '.' {
			c := h[i]
			if !('a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '-' || c == '_') {
				return fmt.Errorf("character %q is not allowed in a host name", c)
			}
			continue
		}
		label := h[start:i]
		switch {
		case label == "":
			return errors.New("empty label (two dots in a row, or a leading dot)")
		case len(label) > maxLabelLen:
			return fmt.Errorf("label %s is %d bytes long (limit %d)", quote(label), len(label), maxLabelLen)
		case label[0] == '-' || label[len(label)-1] == '-':
			return fmt.Errorf("label %s starts or ends with a hyphen", quote(label))
		case i == len(h) && endsInNumber(label):
			// "010.0.0.1", "1.2.3", "0x0a.0.0.1" and friends: not a name,
			// and not an address netip accepts, yet resolvers (inet_aton)
			// and URL parsers read them as IPv4. See Go CVE-2021-29923 and
			// the WHATWG URL "ends in a number" rule.
			return errors.New("looks like an IPv4 address but is not a valid one (no leading zeros, hex or short forms)")
		}
		start = i + 1
	}
	return nil
}

// endsInNumber reports whether a last label is a number in the forms
// inet_aton accepts: decimal, or 0x hex.
func endsInNumber(label string) bool {
	if allDigits(label) {
		return true
	}
	if len(label) >= 2 && label[0] == '0' && (label[1] == 'x' || label[1] == 'X') {
		for i := 2; i < len(label); i++ {
			c := label[i] | 0x20
			if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
				return false
			}
		}
		return true
	}
	return false
}

func allDigits(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

// quote returns s in double quotes with control bytes escaped, shortened so
// that a huge token cannot flood an error message.
func quote(s string) string {
	const limit = 64
	if len(s) > limit {
		cut := limit
		for cut > 0 && !utf8.RuneStart(s[cut]) {
			cut--
		}
		return fmt.Sprintf("%q… (%d bytes)", s[:cut], len(s))
	}
	return fmt.Sprintf("%q", s)
}
