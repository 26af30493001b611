package workspace

import (
	"errors"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"guard"
	"guard/rules"
)

var update = flag.Bool("update", false, "rewrite golden files")

func TestBadProfilesNameTheField(t *testing.T) {
	files, _ := filepath.Glob("testdata/bad/*.json")
	if len(files) == 0 {
		t.Fatal("no inputs")
	}
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			data, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			p, err := Parse(data, filepath.Base(f), "testdata/bad")
			if err == nil {
				t.Fatalf("accepted: %+v", p)
			}
			got := err.Error() + "\n"
			golden := strings.TrimSuffix(f, ".json") + ".errors"
			if *update {
				os.WriteFile(golden, []byte(got), 0o644)
				return
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatalf("%v (run go test -update)", err)
			}
			if got != string(want) {
				t.Errorf("errors differ:\n--- got\n%s--- want\n%s", got, want)
			}
		})
	}
}

func TestDemoProfileLoads(t *testing.T) {
	p, err := Parse(guard.DemoProfile(), "embedded demo", "")
	if err != nil {
		t.Fatal(err)
	}
	if p.Name != "demo" || len(p.Policy.Rules) != 5 || p.Policy.Default != rules.Deny {
		t.Fatalf("unexpected demo: %+v %+v", p, p.Policy)
	}
	if p.Mode("github") != PromptOnWrite || p.Mode("aws") != ReadOnly || p.Mode("db:ch.internal") != Destructive || p.Mode("gitlab") != Off {
		t.Fatal("modes decoded wrong")
	}
	if !p.Egress.Intercepts() || p.Consent.Timeout().Seconds() != 60 || p.LocalInference.Port != 11434 {
		t.Fatal("settings decoded wrong")
	}
	if p.DNS.Servers[0] != "192.0.2.53:53" || p.DNS.Hosts["db.internal"] != "192.0.2.10" {
		t.Fatal("dns decoded wrong")
	}
	// The file on disk is the same profile.
	q, err := LoadFile("../testdata/demo/profile.json")
	if err != nil {
		t.Fatal(err)
	}
	if !q.Policy.Equal(p.Policy) {
		t.Fatal("embedded and on-disk demo differ")
	}
}

func TestMissingGuardrailsMeansOff(t *testing.T) {
	p, err := Parse([]byte(`{"name":"w"}`), "p.json", t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range append(Services(), "db:x.internal") {
		if m := p.Mode(s); m != Off {
			t.Errorf("%s: %s, want off", s, m)
		}
	}
	if p.Policy.Default != rules.Allow || len(p.Policy.Rules) != 0 {
		t.Errorf("no rules should mean an empty default-allow policy")
	}
	if !p.Egress.Intercepts() {
		t.Error("transparent interception should default on")
	}
}

func TestNormalizesValues(t *testing.T) {
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "ca.pem"), []byte(testCA), 0o600)
	os.WriteFile(filepath.Join(dir, "rules.pf"), []byte("allow tcp Example.COM:443\ndefault deny\n"), 0o600)
	p, err := Parse([]byte(`{
	  "name": "w",
	  "credentials": [{"id": "gh", "service": "github", "hosts": ["API.GitHub.com."], "secret": {"command": ["pass", "gh"], "refreshSeconds": 300}}],
	  "egress": {"rulesFile": "rules.pf", "upstreamCAs": ["ca.pem"], "noMitmDomains": ["Pinned.Example."], "transparentInterception": false},
	  "dns": {"servers": ["192.0.2.1", "[2001:db8::53]:5353"], "hosts": {"DB.Internal.": "::ffff:192.0.2.10"}}
	}`), "p.json", dir)
	if err != nil {
		t.Fatal(err)
	}
	if p.Credentials[0].Hosts[0] != "api.github.com" || p.Credentials[0].Title != "gh" {
		t.Errorf("credential not normalized: %+v", p.Credentials[0])
	}
	if p.Egress.NoMitmDomains[0] != "pinned.example" || p.Egress.Intercepts() {
		t.Errorf("egress not normalized: %+v", p.Egress)
	}
	if p.DNS.Servers[0] != "192.0.2.1:53" || p.DNS.Servers[1] != "[2001:db8::53]:5353" || p.DNS.Hosts["db.internal"] != "192.0.2.10" {
		t.Errorf("dns not normalized: %+v", p.DNS)
	}
	if rules.Format(p.Policy) != "allow tcp example.com:443\ndefault deny\n" {
		t.Errorf("rules file not read: %q", rules.Format(p.Policy))
	}
}

// TestScopesAreNormalized: a policy written for "db:CH.Internal." must
// apply to the scope db:ch.internal, not silently fall back to off.
func TestScopesAreNormalized(t *testing.T) {
	p, err := Parse([]byte(`{"name":"w","guardrails":{"db:CH.Internal.":"readOnly","db:::ffff:192.0.2.5":"destructive"}}`), "p.json", t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if p.Mode("db:ch.internal") != ReadOnly || p.Mode("db:192.0.2.5") != Destructive {
		t.Fatalf("modes: %v", p.Guardrails)
	}
	for _, doc := range []string{
		`{"name":"w","guardrails":{"db:ch.internal":"off","db:CH.internal":"readOnly"}}`,
		`{"name":"w","dns":{"hosts":{"db.internal":"192.0.2.1","DB.internal.":"192.0.2.2"}}}`,
	} {
		if _, err := Parse([]byte(doc), "p.json", t.TempDir()); err == nil || !strings.Contains(err.Error(), "the same") {
			t.Errorf("%s: %v", doc, err)
		}
	}
}

func TestWarnings(t *testing.T) {
	p, err := Parse([]byte(`{"name":"w","guardrails":{"kubernetes":"readOnly","db:":"readOnly"},
	  "credentials":[{"id":"t","service":"http","hosts":["x.test"],"secret":{"value":"inline"}}]}`), "p.json", t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		`credentials[0].secret.value: inline secrets are for tests only; use env, file or command`,
		`guardrails["db:"]: a database policy with no host applies to nothing`,
		`guardrails["kubernetes"]: set to readOnly but the profile lists no kubeconfigs, so it applies to nothing`,
	}
	if strings.Join(p.Warnings, "\n") != strings.Join(want, "\n") {
		t.Errorf("warnings:\n%s", strings.Join(p.Warnings, "\n"))
	}
}

func TestEmbeddedProfileRefusesRelativePaths(t *testing.T) {
	_, err := Parse([]byte(`{"name":"w","egress":{"rulesFile":"rules.pf"}}`), "embedded", "")
	if err == nil || !strings.Contains(err.Error(), "egress.rulesFile: relative path") {
		t.Fatalf("got %v", err)
	}
}

func TestMissingProfileFile(t *testing.T) {
	_, err := LoadFile(filepath.Join(t.TempDir(), "nope.json"))
	if !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("got %v", err)
	}
}

func TestInit(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "myws")
	written, err := Init(dir, "myws")
	if err != nil {
		t.Fatal(err)
	}
	if len(written) != 2 {
		t.Fatalf("wrote %v", written)
	}
	p, err := LoadFile(filepath.Join(dir, "profile.json"))
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range Services() {
		if p.Mode(s) != PromptOnWrite {
			t.Errorf("%s is %s, want promptOnWrite", s, p.Mode(s))
		}
	}
	if p.Policy.Default != rules.Deny || len(p.Policy.Rules) == 0 {
		t.Error("template rules not loaded")
	}
	if _, err := Init(dir, "myws"); err == nil || !strings.Contains(err.Error(), "already exists") {
		t.Fatalf("overwrote an existing profile: %v", err)
	}
	if _, err := Init(t.TempDir(), "Bad Name"); err == nil {
		t.Fatal("accepted a bad name")
	}
}

func TestPrepareStateDir(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "state")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := PrepareStateDir(dir); err != nil {
		t.Fatal(err)
	}
	st, _ := os.Stat(dir)
	if st.Mode().Perm() != 0o700 {
		t.Fatalf("mode %v", st.Mode().Perm())
	}
}

// FuzzParseProfile: the strict decoder and validation never panic, and a
// profile that loads has a policy.
func FuzzParseProfile(f *testing.F) {
	f.Add(guard.DemoProfile())
	files, _ := filepath.Glob("testdata/bad/*.json")
	for _, file := range files {
		if b, err := os.ReadFile(file); err == nil {
			f.Add(b)
		}
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		p, err := Parse(data, "fuzz", "")
		if err == nil && p.Policy == nil {
			t.Fatal("loaded without a policy")
		}
	})
}

const testCA = `-----BEGIN CERTIFICATE-----
MIIBhTCCASugAwIBAgIQIRi6zePL6mKjOipn+dNuaTAKBggqhkjOPQQDAjASMRAw
DgYDVQQKEwdBY21lIENvMB4XDTE3MTAyMDE5NDMwNloXDTE4MTAyMDE5NDMwNlow
EjEQMA4GA1UEChMHQWNtZSBDbzBZMBMGByqGSM49AgEGCCqGSM49AwEHA0IABD0d
7VNhbWvZLWPuj/RtHFjvtJBEwOkhbN/BnnE8rnZR8+sbwnc/KhCk3FhnpHZnQz7B
5aETbbIgmuvewdjvSBSjYzBhMA4GA1UdDwEB/wQEAwICpDATBgNVHSUEDDAKBggr
BgEFBQcDATAPBgNVHRMBAf8EBTADAQH/MCkGA1UdEQQiMCCCDmxvY2FsaG9zdDo1
NDUzgg4xMjcuMC4wLjE6NTQ1MzAKBggqhkjOPQQDAgNIADBFAiEA2zpJEPQyz6/l
Wf86aX6PepsntZv2GYlA5UpabfT2EZICICpJ5h/iI+i341gBmLiAFQOyTDT+/wQc
6MF9+Yw1Yy0t
-----END CERTIFICATE-----
`
