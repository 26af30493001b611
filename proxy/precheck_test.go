package proxy

import (
	"net/http"
	"net/netip"
	"testing"

	"guard/rules"
)

func TestPrecheck(t *testing.T) {
	tests := []struct {
		name string
		ci   connInfo
		host string
		ok   bool
	}{
		{"SNI matches", connInfo{tls: true, sni: "a.example"}, "A.Example.:443", true},
		{"SNI differs", connInfo{tls: true, sni: "a.example"}, "b.example", false},
		{"SNI suffix is not a match", connInfo{tls: true, sni: "a.example"}, "a.example.evil", false},
		{"no SNI, Host is the address", connInfo{tls: true, dst: netip.MustParseAddr("192.0.2.1")}, "192.0.2.1", true},
		{"no SNI, Host is a name", connInfo{tls: true, dst: netip.MustParseAddr("192.0.2.1")}, "a.example", false},
		{"no SNI, mapped Host", connInfo{tls: true, dst: netip.MustParseAddr("192.0.2.1")}, "[::ffff:192.0.2.1]:443", true},
		{"CONNECT target matches", connInfo{connectHost: "a.example"}, "a.example", true},
		{"CONNECT target differs", connInfo{connectHost: "a.example"}, "b.example", false},
		{"plain HTTP, any Host", connInfo{}, "b.example", true},
	}
	for _, tt := range tests {
		host, err := requestHost(&http.Request{Host: tt.host})
		if err != nil {
			t.Fatalf("%s: %v", tt.name, err)
		}
		if err := precheck(&tt.ci, host); (err == nil) != tt.ok {
			t.Errorf("%s: %v", tt.name, err)
		}
	}
	for _, bad := range []string{"", "a..b", "[a.example]", "a b", "0x7f.1"} {
		if h, err := requestHost(&http.Request{Host: bad}); err == nil {
			t.Errorf("requestHost(%q) = %q", bad, h)
		}
	}
}

// FuzzRequestHost: whatever a client puts in Host, requestHost either
// refuses it or returns a canonical host that passes the SNI check only
// against itself.
func FuzzRequestHost(f *testing.F) {
	for _, s := range []string{"a.example", "A.EXAMPLE.:443", "[::1]:80", "192.0.2.1", "xn--bcher-kva.example", "bücher.example", "a..b", "[x]"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, h string) {
		host, err := requestHost(&http.Request{Host: h})
		if err != nil {
			return
		}
		if n, nerr := rules.NormalizeHost(host); (nerr != nil && !isAddr(host)) || (nerr == nil && n != host) {
			t.Fatalf("requestHost(%q) = %q, not canonical", h, host)
		}
		if precheck(&connInfo{tls: true, sni: host}, host) != nil {
			t.Fatalf("%q fails against its own SNI", host)
		}
		if precheck(&connInfo{tls: true, sni: "other.invalid-sni.example"}, host) == nil && host != "other.invalid-sni.example" {
			t.Fatalf("%q passes against another SNI", host)
		}
	})
}

func isAddr(s string) bool { _, err := netip.ParseAddr(s); return err == nil }
