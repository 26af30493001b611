package proxy

import (
	"bufio"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os/exec"
	"strings"
	"testing"
	"time"

	"guard/internal/testpki"
)

// echoHandler answers with what it saw.
func echoHandler(name string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		w.Header().Set("X-Upstream", name)
		fmt.Fprintf(w, "%s %s %s host=%s proto=%s body=%d", name, r.Method, r.URL.Path, r.Host, r.Proto, len(body))
	})
}

type world struct {
	pki      *testpki.CA
	api      *upstream // api.example.test on 127.0.0.2
	other    *upstream // other.example.test on 127.0.0.3
	pinned   *upstream // pinned.example.test on 127.0.0.4 (pass-through)
	selfSign *upstream // self.example.test on 127.0.0.5, not trusted
	hosts    map[string]string
	names    staticNames
}

func newWorld(t testing.TB) *world {
	w := &world{pki: testpki.New(t)}
	w.api = startUpstream(t, w.pki, "127.0.0.2", "api.example.test", echoHandler("api"))
	w.other = startUpstream(t, w.pki, "127.0.0.3", "other.example.test", echoHandler("other"))
	w.pinned = startUpstream(t, w.pki, "127.0.0.4", "pinned.example.test", echoHandler("pinned"))
	w.selfSign = startUpstream(t, testpki.New(t), "127.0.0.5", "self.example.test", echoHandler("self"))
	w.hosts = map[string]string{
		"api.example.test": "127.0.0.2", "other.example.test": "127.0.0.3",
		"pinned.example.test": "127.0.0.4", "self.example.test": "127.0.0.5",
	}
	w.names = staticNames{
		netip.MustParseAddr("127.0.0.2"): {"api.example.test"},
		netip.MustParseAddr("127.0.0.3"): {"other.example.test"},
		netip.MustParseAddr("127.0.0.4"): {"pinned.example.test"},
		netip.MustParseAddr("127.0.0.5"): {"self.example.test"},
	}
	return w
}

func (w *world) rig(t testing.TB, rulesText string) *rig {
	return startRig(t, rigOptions{rules: rulesText, hosts: w.hosts, names: w.names,
		noMitm: []string{"pinned.example.test"}, upstreamCAs: w.pki.Pool})
}

func url(u *upstream, path string) string {
	return fmt.Sprintf("https://%s:%d%s", u.name, u.addr.Port(), path)
}

func curl(t *testing.T, args ...string) (string, error) {
	t.Helper()
	cmd := exec.Command("curl", append([]string{"-sS", "--max-time", "20"}, args...)...)
	cmd.Env = []string{"PATH=/usr/bin:/bin"} // no proxy variables from the test's environment
	out, err := cmd.CombinedOutput()
	return string(out), err
}

func TestCurlThroughConnect(t *testing.T) {
	w := newWorld(t)
	r := w.rig(t, "allow tcp example.test\ndefault deny\n")
	out, err := curl(t, "--proxy", "http://"+r.explicit, "--cacert", r.caFile, url(w.api, "/hello"))
	if err != nil || !strings.HasPrefix(out, "api GET /hello host=api.example.test:") {
		t.Fatalf("%v: %s", err, out)
	}
	// The leaf is guard's, for the host's name.
	out, err = curl(t, "-v", "--proxy", "http://"+r.explicit, "--cacert", r.caFile, url(w.api, "/"))
	if err != nil || !strings.Contains(out, "issuer: O=guard; CN=guard workspace test") {
		t.Fatalf("leaf issuer: %v\n%s", err, out)
	}
}

func TestCurlTransparent(t *testing.T) {
	w := newWorld(t)
	r := w.rig(t, "allow tcp api.example.test:443,1024-65535\ndefault deny\n")
	r.divert(w.api.addr)
	out, err := curl(t, "--cacert", r.caFile, "--connect-to", fmt.Sprintf("api.example.test:%d:%s", w.api.addr.Port(), r.transparent),
		"-d", "payload", url(w.api, "/post"))
	if err != nil || !strings.HasPrefix(out, "api POST /post host=api.example.test:") || !strings.Contains(out, "body=7") {
		t.Fatalf("%v: %s", err, out)
	}
}

func TestHTTP2ToClientsAndUpstream(t *testing.T) {
	w := newWorld(t)
	r := w.rig(t, "allow any 127.0.0.0/8\ndefault allow\n")
	c := r.transparentClient(w.api.addr, true)
	resp, err := c.Get(url(w.api, "/h2"))
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.ProtoMajor != 2 || !strings.Contains(string(body), "proto=HTTP/2.0") {
		t.Fatalf("client %s, upstream saw %s", resp.Proto, body)
	}
}

// TestWebMethodRules: allowlist and denylist, with the block body and
// Connection: close.
func TestWebMethodRules(t *testing.T) {
	w := newWorld(t)
	r := w.rig(t, "allow web api.example.test GET\ndeny web other.example.test DELETE,PUT\ndefault deny\n")
	cases := []struct {
		up     *upstream
		method string
		code   int
		body   string
	}{
		{w.api, "GET", 200, "api GET"},
		{w.api, "POST", 403, `{"message":"POST to api.example.test blocked by guardrails"}`},
		{w.other, "GET", 200, "other GET"},
		{w.other, "PATCH", 200, "other PATCH"},
		{w.other, "DELETE", 403, `{"message":"DELETE to other.example.test blocked by guardrails"}`},
		{w.other, "put", 403, "blocked by guardrails"},
	}
	for _, tc := range cases {
		c := r.transparentClient(tc.up.addr, false)
		req, _ := http.NewRequest(tc.method, url(tc.up, "/x"), strings.NewReader("b"))
		resp, err := c.Do(req)
		if err != nil {
			t.Fatalf("%s %s: %v", tc.method, tc.up.name, err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != tc.code || !strings.Contains(string(body), tc.body) {
			t.Errorf("%s %s: %d %s", tc.method, tc.up.name, resp.StatusCode, body)
		}
		if tc.code == 403 && !resp.Close {
			t.Errorf("%s %s: block without Connection: close", tc.method, tc.up.name)
		}
	}
	// The same over HTTP/2.
	resp, err := r.transparentClient(w.api.addr, true).Post(url(w.api, "/x"), "text/plain", strings.NewReader("b"))
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.ProtoMajor != 2 || resp.StatusCode != 403 || string(body) != `{"message":"POST to api.example.test blocked by guardrails"}`+"\n" {
		t.Fatalf("h2 block: %s %d %q", resp.Proto, resp.StatusCode, body)
	}
}

// TestDomainFronting: SNI says one host, Host another.
func TestConsistentHostHeader(t *testing.T) {
	w := newWorld(t)
	r := w.rig(t, "allow any 127.0.0.0/8\ndefault allow\n")
	c := r.transparentClient(w.api.addr, false)
	req, _ := http.NewRequest("GET", url(w.api, "/"), nil)
	req.Host = "other.example.test"
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 403 || !strings.Contains(string(body), "domain fronting blocked by guardrails") {
		t.Fatalf("%d %s", resp.StatusCode, body)
	}
	// Through CONNECT: the tunnel names one host, the SNI another.
	out, err := curl(t, "--proxy", "http://"+r.explicit, "--cacert", r.caFile,
		"--connect-to", fmt.Sprintf("other.example.test:%d:api.example.test:%d", w.api.addr.Port(), w.api.addr.Port()),
		url(&upstream{name: "other.example.test", addr: w.api.addr}, "/"))
	if err == nil {
		t.Fatalf("fronting through CONNECT passed: %s", out)
	}
	fronted := false
	for _, e := range r.events.all() {
		if e.Action == "deny" && strings.Contains(e.Reason, "domain fronting") {
			fronted = true
		}
	}
	if !fronted {
		t.Fatal("no fronting event")
	}
}

func TestConnectDenials(t *testing.T) {
	w := newWorld(t)
	r := w.rig(t, "deny any 127.0.0.3\ndeny tcp blocked.example.test\nallow tcp any\n")
	for _, target := range []string{
		fmt.Sprintf("127.0.0.3:%d", w.other.addr.Port()),
		fmt.Sprintf("[::ffff:127.0.0.3]:%d", w.other.addr.Port()),
		"BLOCKED.Example.TEST.:443",
		"[example.test]:443",
		"0x7f.0.0.3:443",
	} {
		c, err := net.Dial("tcp", r.explicit)
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", target, target)
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		c.Close()
		// 403 from the rules, or 400 where net/http refuses the target
		// before anyone sees it ("[example.test]" is not a host).
		if err != nil || (resp.StatusCode != 403 && resp.StatusCode != 400) {
			t.Errorf("CONNECT %s: %v %v", target, resp, err)
		}
	}
}

func TestPassThroughIsNotDecrypted(t *testing.T) {
	w := newWorld(t)
	r := w.rig(t, "allow any 127.0.0.0/8\ndefault allow\n")
	c := r.transparentClient(w.pinned.addr, false)
	// Trusting only guard's CA fails: the certificate is the upstream's own.
	if _, err := c.Get(url(w.pinned, "/")); err == nil {
		t.Fatal("pass-through host was intercepted")
	}
	c.Transport.(*http.Transport).TLSClientConfig = &tls.Config{RootCAs: w.pki.Pool}
	resp, err := c.Get(url(w.pinned, "/"))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.Header.Get("X-Upstream") != "pinned" {
		t.Fatal("wrong upstream")
	}
	// A web rule forces interception even for a pass-through host.
	r2 := w.rig(t, "allow web pinned.example.test GET\ndefault deny\n")
	c2 := r2.transparentClient(w.pinned.addr, false)
	resp, err = c2.Get(url(w.pinned, "/"))
	if err != nil {
		t.Fatalf("web rule did not force interception: %v", err)
	}
	resp.Body.Close()
}

func TestUntrustedUpstreamFails(t *testing.T) {
	w := newWorld(t)
	r := w.rig(t, "allow any 127.0.0.0/8\ndefault allow\n")
	resp, err := r.transparentClient(w.selfSign.addr, false).Get(url(w.selfSign, "/"))
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadGateway || !strings.Contains(string(body), "certificate") {
		t.Fatalf("%d %s", resp.StatusCode, body)
	}
}

// TestDialRecheckStopsRebinding: a name the rules allow, resolving to an
// address the rules deny, is not dialled.
func TestDialRecheckStopsRebinding(t *testing.T) {
	w := newWorld(t)
	// The internal server even has a valid certificate for the name, so
	// only the address check stands in the way.
	internal := startUpstream(t, w.pki, "127.0.0.9", "rebind.example.test", echoHandler("internal"))
	w.hosts["rebind.example.test"] = "127.0.0.9"
	r := w.rig(t, "deny any 127.0.0.9\nallow tcp rebind.example.test\ndefault deny\n")
	out, _ := curl(t, "--proxy", "http://"+r.explicit, "--cacert", r.caFile, url(internal, "/"))
	if strings.Contains(out, "internal GET") || !strings.Contains(out, "refused by line 1: deny any 127.0.0.9; blocked by guardrails") {
		t.Fatalf("rebound name: %s", out)
	}
	// Without the deny the same request goes through: the check above is
	// what stopped it.
	r2 := w.rig(t, "allow tcp rebind.example.test\ndefault deny\n")
	if out, err := curl(t, "--proxy", "http://"+r2.explicit, "--cacert", r2.caFile, url(internal, "/")); err != nil || !strings.HasPrefix(out, "internal GET") {
		t.Fatalf("control case: %v %s", err, out)
	}
}

// TestProxyEnvironmentIgnored: HTTPS_PROXY in guard's own environment must
// not redirect its upstream traffic.
func TestProxyEnvironmentIgnored(t *testing.T) {
	t.Setenv("HTTPS_PROXY", "http://127.0.0.1:9")
	t.Setenv("HTTP_PROXY", "http://127.0.0.1:9")
	t.Setenv("ALL_PROXY", "http://127.0.0.1:9")
	w := newWorld(t)
	r := w.rig(t, "allow any 127.0.0.0/8\ndefault allow\n")
	resp, err := r.transparentClient(w.api.addr, false).Get(url(w.api, "/"))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 || resp.Header.Get("X-Upstream") != "api" {
		t.Fatalf("%d %v", resp.StatusCode, resp.Header)
	}
}
