package classify

import (
	"bufio"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"testing"
)

// testServices are the hosts testdata/cases.txt assumes the profile names.
func testServices() *Services {
	return &Services{
		Kubernetes: []string{"kube.test:6443"},
		Registries: []string{"registry.test:5000"},
		Databases:  map[string]Kind{"ch.test": KindClickHouse, "es.test": KindElasticsearch},
	}
}

type testCase struct {
	line   int
	method string
	url    string
	header http.Header
	body   []byte
	want   Class
}

// readCases parses testdata/cases.txt.
func readCases(t testing.TB) []testCase {
	f, err := os.Open("testdata/cases.txt")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []testCase
	var cur *testCase
	inBody := false
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		switch {
		case cur == nil && (line == "" || strings.HasPrefix(line, "#")):
		case cur == nil:
			method, u, _ := strings.Cut(line, " ")
			cur = &testCase{line: n, method: method, url: u, header: http.Header{}}
			inBody = false
		case strings.HasPrefix(line, "=> "):
			cur.want = Class(strings.TrimPrefix(line, "=> "))
			cur.body = []byte(strings.TrimSuffix(string(cur.body), "\n"))
			out = append(out, *cur)
			cur = nil
		case line == "--" && !inBody:
			inBody = true
		case inBody:
			cur.body = append(cur.body, line+"\n"...)
		default:
			k, v, _ := strings.Cut(line, ":")
			cur.header.Add(strings.TrimSpace(k), strings.TrimSpace(v))
		}
	}
	return out
}

// requestOf builds the classifier's view of a case, as the proxy hook does.
func requestOf(t testing.TB, s *Services, c testCase) (Route, *Request) {
	u, err := url.Parse(c.url)
	if err != nil {
		t.Fatal(err)
	}
	port := 443
	if p := u.Port(); p != "" {
		port, _ = strconv.Atoi(p)
	}
	rt, ok := s.Route(u.Hostname(), port)
	if !ok {
		t.Fatalf("line %d: no service for %s", c.line, u.Host)
	}
	r := NewRequest(c.method, u.Hostname(), u.Path, u.RawQuery, c.header)
	if NeedsBody(rt, r) {
		r.Body = c.body
	}
	return rt, r
}

func TestCases(t *testing.T) {
	s := testServices()
	cases := readCases(t)
	if len(cases) < 80 {
		t.Fatalf("only %d cases read", len(cases))
	}
	for _, c := range cases {
		rt, r := requestOf(t, s, c)
		op := Classify(rt, r)
		if op.Class != c.want || op.Reason == "" || op.Service == "" || op.Scope == "" {
			t.Errorf("line %d: %s %s: %s (%s), want %s", c.line, c.method, c.url, op.Class, op.Reason, c.want)
		}
		status, _, body := Refusal(rt, r, "x blocked by guardrails")
		if status != http.StatusForbidden || !strings.Contains(string(body), "x blocked by guardrails") {
			t.Errorf("line %d: refusal %d %s", c.line, status, body)
		}
	}
}

func TestRoutes(t *testing.T) {
	s := testServices()
	for _, tc := range []struct {
		host  string
		port  int
		kind  Kind
		scope string
	}{
		{"api.github.com", 443, KindForge, "github"},
		{"s3.amazonaws.com", 443, KindAWS, "aws"},
		{"kube.test", 6443, KindKubernetes, "kube:kube.test"},
		{"registry.test", 5000, KindRegistry, "docker:registry.test"},
		{"index.docker.io", 443, KindRegistry, "docker:registry-1.docker.io"},
		{"ghcr.io", 443, KindRegistry, "docker:ghcr.io"},
		{"ch.test", 8123, KindClickHouse, "db:ch.test"},
		{"api.digitalocean.com", 443, KindDigitalOcean, "digitalocean"},
	} {
		rt, ok := s.Route(tc.host, tc.port)
		if !ok || rt.Kind != tc.kind || rt.Scope != tc.scope {
			t.Errorf("%s:%d: %+v %v", tc.host, tc.port, rt, ok)
		}
	}
	for _, host := range []string{"example.com", "amazonaws.com.evil.test", "notghcr.io", "kube.test.evil"} {
		if rt, ok := s.Route(host, 443); ok {
			t.Errorf("%s routed to %+v", host, rt)
		}
	}
}
