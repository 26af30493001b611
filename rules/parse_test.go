package rules

import (
	"errors"
	"flag"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite golden files")

// golden compares got with testdata/<name>, or rewrites it with -update.
func golden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test -update to create it)", err)
	}
	if got != string(want) {
		t.Errorf("%s differs from golden file:\n--- got\n%s--- want\n%s", name, got, want)
	}
}

func TestGoodFilesCanonical(t *testing.T) {
	files, _ := filepath.Glob("testdata/good/*.rules")
	if len(files) == 0 {
		t.Fatal("no golden inputs")
	}
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			src, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			p, err := Parse(src)
			if err != nil {
				t.Fatalf("parse: %v", err)
			}
			out := Format(p)
			golden(t, strings.TrimSuffix(strings.TrimPrefix(f, "testdata/"), ".rules")+".canonical", out)
			assertRoundTrip(t, p)
		})
	}
}

func TestBadFilesReportEveryLine(t *testing.T) {
	files, _ := filepath.Glob("testdata/bad/*.rules")
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			src, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			p, err := Parse(src)
			if err == nil {
				t.Fatalf("parsed a bad file into %d rules", len(p.Rules))
			}
			var perr *ParseError
			if !errors.As(err, &perr) {
				t.Fatalf("error is %T, want *ParseError", err)
			}
			golden(t, strings.TrimSuffix(strings.TrimPrefix(f, "testdata/"), ".rules")+".errors", err.Error()+"\n")
		})
	}
}

// assertRoundTrip checks both laws of the package doc.
func assertRoundTrip(t *testing.T, p *Policy) {
	t.Helper()
	text := Format(p)
	q, err := ParseString(text)
	if err != nil {
		t.Fatalf("canonical text does not parse: %v\n%s", err, text)
	}
	if !p.Equal(q) {
		t.Fatalf("parse(format(p)) != p\n%s", text)
	}
	if again := Format(q); again != text {
		t.Fatalf("format is not a fixed point:\n%s---\n%s", text, again)
	}
}

func TestParseRule(t *testing.T) {
	v4 := func(s string) netip.Prefix { return netip.MustParsePrefix(s) }
	tests := []struct {
		line string
		want Rule
	}{
		{"allow any", Rule{Action: Allow, Proto: Any, Target: Target{Kind: AnyTarget}}},
		{"deny *", Rule{Action: Deny, Proto: Any, Target: Target{Kind: AnyTarget}}},
		{"deny any any:53", Rule{Action: Deny, Proto: Any, Target: Target{Kind: AnyTarget}, Ports: PortSet{{53, 53}}}},
		{"allow Example.COM.", Rule{Action: Allow, Proto: Any, Target: Target{Kind: Domain, Host: "example.com"}}},
		{"allow *.Example.com", Rule{Action: Allow, Proto: Any, Target: Target{Kind: Subdomains, Host: "example.com"}}},
		{"allow tcp ΕΛΛΗΝΙΚΆ.example:443", Rule{Action: Allow, Proto: TCP, Target: Target{Kind: Domain, Host: "xn--hxargifdar.example"}, Ports: PortSet{{443, 443}}}},
		{"allow tcp example。com", Rule{Action: Allow, Proto: TCP, Target: Target{Kind: Domain, Host: "example.com"}}},
		{"allow tcp _sip._tcp.example.com", Rule{Action: Allow, Proto: TCP, Target: Target{Kind: Domain, Host: "_sip._tcp.example.com"}}},
		{"allow tcp 192.0.2.1", Rule{Action: Allow, Proto: TCP, Target: Target{Kind: Prefix, Prefix: v4("192.0.2.1/32")}}},
		{"allow tcp ::ffff:192.0.2.1", Rule{Action: Allow, Proto: TCP, Target: Target{Kind: Prefix, Prefix: v4("192.0.2.1/32")}}},
		{"allow tcp ::ffff:10.0.0.0/104", Rule{Action: Allow, Proto: TCP, Target: Target{Kind: Prefix, Prefix: v4("10.0.0.0/8")}}},
		{"allow tcp [2001:db8::/32]:443", Rule{Action: Allow, Proto: TCP, Target: Target{Kind: Prefix, Prefix: v4("2001:db8::/32")}, Ports: PortSet{{443, 443}}}},
		{"allow tcp [2001:db8::1]", Rule{Action: Allow, Proto: TCP, Target: Target{Kind: Prefix, Prefix: v4("2001:db8::1/128")}}},
		{"allow tcp 0.0.0.0/0:1-1024,443", Rule{Action: Allow, Proto: TCP, Target: Target{Kind: Prefix, Prefix: v4("0.0.0.0/0")}, Ports: PortSet{{1, 1024}}}},
		{"allow tcp x.com:80,81,82,90", Rule{Action: Allow, Proto: TCP, Target: Target{Kind: Domain, Host: "x.com"}, Ports: PortSet{{80, 82}, {90, 90}}}},
		{"allow tcp x.com:*", Rule{Action: Allow, Proto: TCP, Target: Target{Kind: Domain, Host: "x.com"}}},
		{"allow web x.com read-only,post", Rule{Action: Allow, Proto: Web, Target: Target{Kind: Domain, Host: "x.com"}, Methods: []string{"GET", "HEAD", "OPTIONS", "POST"}}},
		{"deny web x.com methods put, delete", Rule{Action: Deny, Proto: Web, Target: Target{Kind: Domain, Host: "x.com"}, Methods: []string{"DELETE", "PUT"}}},
		{"deny web x.com", Rule{Action: Deny, Proto: Web, Target: Target{Kind: Domain, Host: "x.com"}}},
		{"allow web localhost", Rule{Action: Allow, Proto: Web, Target: Target{Kind: Domain, Host: "localhost"}}},
	}
	for _, tt := range tests {
		t.Run(tt.line, func(t *testing.T) {
			p, err := ParseString(tt.line)
			if err != nil {
				t.Fatal(err)
			}
			if len(p.Rules) != 1 {
				t.Fatalf("got %d rules", len(p.Rules))
			}
			if got := p.Rules[0]; !got.Equal(tt.want) || got.Line != 1 {
				t.Fatalf("got %+v\nwant %+v", got, tt.want)
			}
			assertRoundTrip(t, p)
		})
	}
}

func TestDefaults(t *testing.T) {
	p, err := ParseString("allow tcp x.com\n")
	if err != nil {
		t.Fatal(err)
	}
	if p.Default != Allow || p.DefaultLine != 0 {
		t.Fatalf("no default line: got %v at %d, want allow", p.Default, p.DefaultLine)
	}
	p, err = ParseString("\r\n# c\r\nDEFAULT Deny\r\nallow tcp x.com\r\n")
	if err != nil {
		t.Fatal(err)
	}
	if p.Default != Deny || p.DefaultLine != 3 || p.Rules[0].Line != 4 {
		t.Fatalf("got default %v line %d, rule line %d", p.Default, p.DefaultLine, p.Rules[0].Line)
	}
}

// TestHugeLine feeds a 10 MB line: the error must be short and name the
// line, not echo it.
func TestHugeLine(t *testing.T) {
	src := "allow tcp ok.example.com\nallow tcp " + strings.Repeat("a", 10<<20) + "\ndefault maybe\n"
	_, err := ParseString(src)
	if err == nil {
		t.Fatal("accepted a 10 MB line")
	}
	msg := err.Error()
	if len(msg) > 300 || !strings.Contains(msg, "Line 2: line is 10485770 bytes long") || !strings.Contains(msg, "Line 3: unknown default") {
		t.Fatalf("unhelpful error (%d bytes): %.300s", len(msg), msg)
	}
}

// TestCanonicalFormStaysParsable: read-only expands when formatted, so a
// source line under the limit can format over it; Parse must refuse it.
func TestCanonicalFormStaysParsable(t *testing.T) {
	line := "allow web x.example read-only"
	for i := 0; len(line) < MaxLineBytes-7; i++ {
		line += fmt.Sprintf(",M%04d", i)
	}
	_, err := ParseString(line)
	if err == nil || !strings.Contains(err.Error(), "in canonical form") {
		t.Fatalf("got %v", err)
	}
}

func TestErrorCap(t *testing.T) {
	src := strings.Repeat("bogus\n", 1000)
	_, err := ParseString(src)
	var perr *ParseError
	if !errors.As(err, &perr) {
		t.Fatalf("got %v", err)
	}
	if len(perr.Errors) != maxReportedErrors || perr.Omitted != 1000-maxReportedErrors {
		t.Fatalf("kept %d, omitted %d", len(perr.Errors), perr.Omitted)
	}
	if !strings.HasSuffix(err.Error(), "… and 800 more bad lines") {
		t.Fatalf("summary missing: %q", err.Error()[len(err.Error())-60:])
	}
}

// TestSuffixIsNotAMatchTarget: a rule host is a name, not a substring; the
// firewall tests check matching, here we check nothing odd is accepted.
func TestHostNormalization(t *testing.T) {
	tests := []struct {
		in, want, err string
	}{
		{in: "EXAMPLE.com.", want: "example.com"},
		{in: "xn--bcher-kva.example", want: "xn--bcher-kva.example"},
		{in: "Bücher.Example", want: "xn--bcher-kva.example"},
		{in: "xn--zz.example", err: "not a valid internationalized name"},
		{in: "[example.com]", err: "brackets are only for IPv6"},
		{in: "example..com", err: "empty label"},
		{in: ".example.com", err: "empty label"},
		{in: "example.com..", err: "empty label"},
		{in: "ex ample.com", err: "not allowed"},
		{in: "1.2.3", err: "looks like an IPv4 address"},
		{in: strings.Repeat("a", 64) + ".com", err: "limit 63"},
		{in: strings.Repeat("abcdefghi.", 26), err: "limit 253"},
	}
	for _, tt := range tests {
		got, err := NormalizeHost(tt.in)
		switch {
		case tt.err != "" && (err == nil || !strings.Contains(err.Error(), tt.err)):
			t.Errorf("NormalizeHost(%q) = %q, %v; want error containing %q", tt.in, got, err, tt.err)
		case tt.err == "" && (err != nil || got != tt.want):
			t.Errorf("NormalizeHost(%q) = %q, %v; want %q", tt.in, got, err, tt.want)
		}
	}
}

func TestPortSetContains(t *testing.T) {
	s := PortSet{{22, 22}, {80, 90}, {443, 443}, {8000, 9000}}
	for port, want := range map[uint16]bool{1: false, 22: true, 23: false, 80: true, 85: true, 90: true, 91: false, 443: true, 8500: true, 9001: false, 65535: false} {
		if got := s.Contains(port); got != want {
			t.Errorf("Contains(%d) = %v", port, got)
		}
	}
	if !PortSet(nil).Contains(1) {
		t.Error("empty set must contain every port")
	}
}
