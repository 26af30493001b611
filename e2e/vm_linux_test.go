package e2e

import (
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"guard/internal/testnet"
	"guard/internal/testpki"
)

// TestGuarddIsTheVMsNetwork runs guardd --vm afpacket: for a namespace
// standing in for the VM, and real programs inside it: DNS through the
// gateway, curl through the transparent proxy, the host's model server
// named localhost, and a hot rules change that new flows see at once.
func TestGuarddIsTheVMsNetwork(t *testing.T) {
	ns, hostIf := testnet.VM(t, netip.MustParsePrefix("10.0.2.15/24"), netip.MustParseAddr("10.0.2.2"))
	testnet.HostAddresses(t, "198.18.0.20")
	pki := testpki.New(t)
	ln, err := net.Listen("tcp", "198.18.0.20:443")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "hello from "+r.Host)
	}), TLSConfig: &tls.Config{Certificates: []tls.Certificate{pki.ServerCert(t, "svc.example.test")}}}
	go srv.ServeTLS(ln, "", "")
	defer srv.Close()

	// The host's model server, named "localhost" in the profile.
	model, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer model.Close()
	go func() {
		for {
			c, err := model.Accept()
			if err != nil {
				return
			}
			io.WriteString(c, "model on localhost\n")
			c.Close()
		}
	}()
	modelPort := model.Addr().(*net.TCPAddr).Port

	dir := shortDir(t)
	writeFile(t, dir, "upstream-ca.pem", string(pki.PEM))
	prof := writeFile(t, dir, "profile.json", fmt.Sprintf(`{"name":"vmtest",
	  "egress":{"rules":"allow web svc.example.test read-only\ndefault deny\n","upstreamCAs":["upstream-ca.pem"]},
	  "localInference":{"host":"localhost","port":%d},
	  "dns":{"servers":["127.0.0.1:9"],"hosts":{"svc.example.test":"198.18.0.20"}}}`, modelPort))
	g := startGuardd(t, "--profile", prof, "--vm", "afpacket:"+hostIf)
	caPEM, _ := g.ctl(t, "ca", "export")
	caFile := writeFile(t, dir, "ca.pem", caPEM)

	var out string
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		if out, err = testnet.InVM(ns, "getent", "hosts", "svc.example.test"); err == nil {
			break
		}
	}
	if !strings.HasPrefix(out, "198.18.0.20") {
		t.Fatalf("DNS through guardd: %v %s", err, out)
	}
	curl := func(args ...string) (string, error) {
		return testnet.InVM(ns, append([]string{"curl", "-sS", "--max-time", "10", "--cacert", caFile}, args...)...)
	}
	if out, err := curl("https://svc.example.test/"); err != nil || out != "hello from svc.example.test" {
		t.Fatalf("GET: %v %s", err, out)
	}
	if out, _ := curl("-X", "DELETE", "https://svc.example.test/"); !strings.Contains(out, "DELETE to svc.example.test blocked by guardrails") {
		t.Fatalf("DELETE: %s", out)
	}
	// The local model, by the name the profile gives, through the gateway.
	if out, err := testnet.InVM(ns, "bash", "-c", fmt.Sprintf("timeout 5 cat < /dev/tcp/10.0.2.2/%d", modelPort)); err != nil || out != "model on localhost\n" {
		t.Fatalf("local inference by name: %v %q", err, out)
	}
	// A new policy applies to the next flow.
	deny := writeFile(t, dir, "deny.rules", "deny any 198.18.0.20\ndefault deny\n")
	if out, code := g.ctl(t, "rules", "apply", deny); code != 0 {
		t.Fatal(out)
	}
	if out, err := curl("https://svc.example.test/"); err == nil {
		t.Fatalf("flow after the deny was applied: %s", out)
	}
	ev, _ := g.ctl(t, "events")
	for _, want := range []string{"intercept l4 tcp svc.example.test (198.18.0.20) port 443", "deny l4 tcp svc.example.test (198.18.0.20) port 443"} {
		if !strings.Contains(ev, want) {
			t.Errorf("events lack %q:\n%s", want, ev)
		}
	}
}

// TestQEMULinkSocket: guardd --vm qemu:PATH listens (0600) for the VM; a
// VM that sends garbage loses its link, and the next one can connect.
func TestQEMULinkSocket(t *testing.T) {
	dir := shortDir(t)
	sock := dir + "/vm.sock"
	g := startGuardd(t, "--demo", "--vm", "qemu:"+sock)
	st, err := os.Stat(sock)
	if err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("link socket: %v %v", st, err)
	}
	c, err := net.Dial("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	c.Write([]byte{0xff, 0xff, 0xff, 0xff, 1, 2, 3})
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := c.Read(make([]byte, 1)); err == nil {
		t.Fatal("a garbage frame did not end the link")
	}
	c.Close()
	c2, err := net.Dial("unix", sock)
	if err != nil {
		t.Fatalf("second VM: %v", err)
	}
	c2.Close()
	if out, _ := g.ctl(t, "status"); !strings.Contains(out, "vm qemu:"+sock) || !strings.Contains(out, "running") {
		t.Fatalf("status:\n%s", out)
	}
}

// TestNetnsForTheAgent: guardd --netns makes the agent's namespace, whose
// programs reach the world only through guardd, and removes it on exit.
func TestNetnsForTheAgent(t *testing.T) {
	testnet.HostAddresses(t, "198.18.0.21")
	pki := testpki.New(t)
	ln, err := net.Listen("tcp", "198.18.0.21:443")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "agent reached "+r.Host)
	}), TLSConfig: &tls.Config{Certificates: []tls.Certificate{pki.ServerCert(t, "api.example.test")}}}
	go srv.ServeTLS(ln, "", "")
	defer srv.Close()
	dir := shortDir(t)
	writeFile(t, dir, "upstream-ca.pem", string(pki.PEM))
	prof := writeFile(t, dir, "profile.json", `{"name":"nstest",
	  "egress":{"rules":"allow tcp api.example.test:443\ndefault deny\n","upstreamCAs":["upstream-ca.pem"]},
	  "dns":{"servers":["127.0.0.1:9"],"hosts":{"api.example.test":"198.18.0.21"}}}`)
	ns := fmt.Sprintf("gtest%d", os.Getpid()%100000)
	exec.Command("ip", "netns", "del", ns).Run()
	g := startGuardd(t, "--profile", prof, "--netns", ns)
	caPEM, _ := g.ctl(t, "ca", "export")
	caFile := writeFile(t, dir, "ca.pem", caPEM)
	out, err := testnet.InVM(ns, "curl", "-sS", "--max-time", "10", "--cacert", caFile, "https://api.example.test/")
	if err != nil || out != "agent reached api.example.test" {
		t.Fatalf("curl in the namespace: %v %s", err, out)
	}
	if link, _ := testnet.InVM(ns, "ip", "link", "show", "dev", "eth0"); !strings.Contains(link, "mtu 65520") {
		t.Errorf("the namespace's link is not jumbo: %s", link)
	}
	if out, err := testnet.InVM(ns, "curl", "-sS", "--max-time", "5", "http://198.18.0.21:443/"); err == nil {
		t.Fatalf("plain HTTP on 443 passed: %s", out)
	}
	if err := g.stop(t); err != nil {
		t.Fatalf("stop: %v", err)
	}
	if _, err := os.Stat("/run/netns/" + ns); !os.IsNotExist(err) {
		t.Fatalf("namespace left behind: %v", err)
	}
}

// TestTapLink: guardd --vm tap:IFNAME creates the TAP device; moved into a
// namespace, its programs reach the world through guardd.
func TestTapLink(t *testing.T) {
	testnet.HostAddresses(t, "198.18.0.22")
	ln, err := net.Listen("tcp", "198.18.0.22:7010")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			io.WriteString(c, "via tap\n")
			c.Close()
		}
	}()
	dir := shortDir(t)
	prof := writeFile(t, dir, "profile.json", `{"name":"taptest","egress":{"rules":"allow tcp 198.18.0.22:7010\ndefault deny\n"},"dns":{"servers":["127.0.0.1:9"]}}`)
	tap := fmt.Sprintf("gtap%d", os.Getpid()%100000)
	ns := "gns" + tap[4:]
	exec.Command("ip", "netns", "del", ns).Run()
	t.Cleanup(func() { exec.Command("ip", "netns", "del", ns).Run() })
	startGuardd(t, "--profile", prof, "--vm", "tap:"+tap)
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if _, err := net.InterfaceByName(tap); err == nil {
			break
		} else if time.Now().After(deadline) {
			t.Fatalf("guardd made no TAP device %s", tap)
		}
	}
	testnet.Run(t, "ip", "netns", "add", ns)
	testnet.Run(t, "ip", "link", "set", tap, "netns", ns)
	testnet.Run(t, "ip", "-n", ns, "addr", "add", "10.0.2.15/24", "dev", tap)
	testnet.Run(t, "ip", "-n", ns, "link", "set", tap, "up")
	testnet.Run(t, "ip", "-n", ns, "route", "add", "default", "via", "10.0.2.2")
	out, err := testnet.InVM(ns, "bash", "-c", "timeout 10 cat < /dev/tcp/198.18.0.22/7010")
	if err != nil || out != "via tap\n" {
		t.Fatalf("flow over the TAP link: %v %q", err, out)
	}
	if out, err := testnet.InVM(ns, "bash", "-c", "timeout 5 cat < /dev/tcp/198.18.0.22/7011"); err == nil {
		t.Fatalf("denied flow over the TAP link: %q", out)
	}
}
