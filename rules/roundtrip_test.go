package rules

import (
	"math/rand/v2"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// RandomPolicy builds a valid policy from r. It is the generator for the
// property test here and for the firewall's differential tests.
func randomPolicy(r *rand.Rand, n int) *Policy {
	p := &Policy{Default: Action(1 + r.IntN(2))}
	for range n {
		p.Rules = append(p.Rules, randomRule(r))
	}
	return p
}

func randomRule(r *rand.Rand) Rule {
	rule := Rule{Action: Action(1 + r.IntN(2)), Proto: Proto(1 + r.IntN(4))}
	switch r.IntN(5) {
	case 0:
		rule.Target = Target{Kind: AnyTarget}
	case 1:
		rule.Target = Target{Kind: Domain, Host: randomHost(r)}
	case 2:
		rule.Target = Target{Kind: Subdomains, Host: randomHost(r)}
	case 3:
		a := netip.AddrFrom4([4]byte{byte(r.IntN(256)), byte(r.IntN(256)), byte(r.IntN(256)), byte(r.IntN(256))})
		rule.Target = Target{Kind: Prefix, Prefix: netip.PrefixFrom(a, r.IntN(33)).Masked()}
	case 4:
		var b [16]byte
		for i := range b {
			b[i] = byte(r.IntN(256))
		}
		b[0] = 0x20 // keep clear of the IPv4-mapped range
		rule.Target = Target{Kind: Prefix, Prefix: netip.PrefixFrom(netip.AddrFrom16(b), r.IntN(129)).Masked()}
	}
	if r.IntN(2) == 0 {
		var set PortSet
		for range 1 + r.IntN(3) {
			lo := uint16(1 + r.IntN(65535))
			hi := lo
			if r.IntN(3) == 0 {
				hi = lo + uint16(r.IntN(int(65535-lo)+1))
			}
			set = append(set, PortRange{lo, hi})
		}
		rule.Ports = normalizePorts(set)
	}
	if rule.Proto == Web && r.IntN(2) == 0 {
		all := []string{"GET", "HEAD", "OPTIONS", "POST", "PUT", "PATCH", "DELETE", "PROPFIND"}
		for _, m := range all {
			if r.IntN(3) == 0 {
				rule.Methods = append(rule.Methods, m)
			}
		}
		if len(rule.Methods) == 0 {
			rule.Methods = []string{"GET"}
		}
		slices.Sort(rule.Methods)
	}
	return rule
}

func randomHost(r *rand.Rand) string {
	labels := []string{"a", "api", "github", "example", "com", "xn--bcher-kva", "_svc", "b-2", "internal", "io"}
	n := 1 + r.IntN(4)
	h := labels[r.IntN(len(labels))]
	for range n {
		h += "." + labels[r.IntN(len(labels))]
	}
	return h + ".test"
}

func TestRoundTripProperty(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for range 2000 {
		assertRoundTrip(t, randomPolicy(r, r.IntN(20)))
	}
}

// FuzzParse checks that the parser never panics, and that whatever it accepts
// survives format and parse unchanged, with format a fixed point.
func FuzzParse(f *testing.F) {
	for _, dir := range []string{"testdata/good", "testdata/bad"} {
		files, _ := filepath.Glob(filepath.Join(dir, "*.rules"))
		for _, file := range files {
			if b, err := os.ReadFile(file); err == nil {
				f.Add(b)
			}
		}
	}
	f.Fuzz(func(t *testing.T, src []byte) {
		p, err := Parse(src)
		if err != nil {
			if _, ok := err.(*ParseError); !ok {
				t.Fatalf("error of type %T", err)
			}
			return
		}
		assertRoundTrip(t, p)
	})
}
