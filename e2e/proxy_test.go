package e2e

import (
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"guard/internal/testpki"
)

func freeLoopbackAddr(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// TestGuarddProxyWithCurl runs guardd --proxy-listen against an HTTPS
// upstream whose CA the profile names, and curl through it with the CA
// that guardctl ca export prints.
func TestGuarddProxyWithCurl(t *testing.T) {
	pki := testpki.New(t)
	ln, err := net.Listen("tcp", "127.0.0.2:0")
	if err != nil {
		t.Fatal(err)
	}
	up := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		fmt.Fprintf(w, "upstream %s %s", r.Method, r.URL.Path)
	}))
	up.Listener.Close()
	up.Listener = ln
	up.TLS = &tls.Config{Certificates: []tls.Certificate{pki.ServerCert(t, "api.example.test")}}
	up.StartTLS()
	defer up.Close()
	port := ln.Addr().(*net.TCPAddr).Port

	dir := shortDir(t)
	writeFile(t, dir, "upstream-ca.pem", string(pki.PEM))
	prof := writeFile(t, dir, "profile.json", `{"name":"px",
	  "egress":{"rules":"allow web api.example.test GET\ndefault deny\n","upstreamCAs":["upstream-ca.pem"]},
	  "dns":{"hosts":{"api.example.test":"127.0.0.2"}}}`)
	proxyAddr := freeLoopbackAddr(t)
	g := startGuardd(t, "--profile", prof, "--proxy-listen", proxyAddr)

	caPEM, code := g.ctl(t, "ca", "export")
	if code != 0 || !strings.HasPrefix(caPEM, "-----BEGIN CERTIFICATE-----") {
		t.Fatalf("ca export: %d %s", code, caPEM)
	}
	caPath, _ := g.ctl(t, "ca", "path")
	if strings.TrimSpace(caPath) != filepath.Join(g.state, "ca.pem") {
		t.Fatalf("ca path: %s", caPath)
	}
	if st, err := os.Stat(filepath.Join(g.state, "ca-key.pem")); err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("CA key: %v", err)
	}
	caFile := writeFile(t, dir, "guard-ca.pem", caPEM)
	target := fmt.Sprintf("https://api.example.test:%d/ok", port)
	curl := func(args ...string) (string, error) {
		cmd := exec.Command("curl", append([]string{"-sS", "--max-time", "20", "--proxy", "http://" + proxyAddr, "--cacert", caFile}, args...)...)
		cmd.Env = []string{"PATH=/usr/bin:/bin"}
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	if out, err := curl(target); err != nil || out != "upstream GET /ok" {
		t.Fatalf("GET: %v %s", err, out)
	}
	if out, _ := curl("-X", "POST", "-d", "x", target); out != `{"message":"POST to api.example.test blocked by guardrails"}`+"\n" {
		t.Fatalf("POST: %s", out)
	}
	out, _ := g.ctl(t, "events")
	if !strings.Contains(out, "allow http tcp api.example.test") || !strings.Contains(out, "deny http tcp api.example.test") {
		t.Fatalf("events:\n%s", out)
	}
	out, _ = g.ctl(t, "status")
	if !strings.Contains(out, "proxy "+proxyAddr) {
		t.Fatalf("status:\n%s", out)
	}
}

func TestProxyListenRefusesNonLoopback(t *testing.T) {
	cmd := exec.Command(filepath.Join(bin, "guardd"), "--demo", "--state-dir", filepath.Join(shortDir(t), "s"), "--proxy-listen", "0.0.0.0:0")
	out, err := cmd.CombinedOutput()
	if err == nil || !strings.Contains(string(out), "only listens on loopback") {
		t.Fatalf("%v: %s", err, out)
	}
}
