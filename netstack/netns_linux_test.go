package netstack

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"sync"
	"testing"

	"guard/audit"
	"guard/firewall"
	"guard/internal/testnet"
)

// decider is the daemon's DecideFlow in small: verdict plus event.
type decider struct {
	active *firewall.Active
	mu     sync.Mutex
	events []audit.Event
}

func (d *decider) DecideFlow(ctx context.Context, f firewall.Flow, layer string) firewall.Verdict {
	v := d.active.Load().Verdict(f)
	d.Emit(ctx, audit.FlowEvent(layer, f, v))
	return v
}

func (d *decider) Emit(_ context.Context, e audit.Event) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.events = append(d.events, e)
	return nil
}

func (d *decider) all() []audit.Event {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]audit.Event(nil), d.events...)
}

// TestVMInNamespace runs real programs in a namespace whose only network is
// guard's stack: DNS through the gateway, curl to an allowed and a denied
// HTTPS host through the transparent proxy, a plain TCP flow, and the
// gateway itself, which is not a host but for the local model's port.
func TestVMInNamespace(t *testing.T) {
	testnet.HostAddresses(t, "198.18.0.10", "198.18.0.11")
	// The host's "model server" on loopback, reachable only through the
	// local-inference exemption.
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
			io.WriteString(c, "model here\n")
			c.Close()
		}
	}()
	li := netip.MustParseAddrPort(model.Addr().String())
	// The tcp rule comes first: a web rule without ports covers every TCP
	// port of its host, and would send this server-speaks-first flow to
	// the proxy.
	r := newAgentRig(t, "allow tcp 198.18.0.10:7000\nallow web api.example.test read-only\ndefault deny\n",
		map[string]string{"api.example.test": "198.18.0.10", "blocked.example.test": "198.18.0.11"}, agentOptions{localInference: li})
	serve := func(addr, name, body string) {
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
			io.WriteString(w, body+" "+req.Method+" "+req.Host)
		}), TLSConfig: &tls.Config{Certificates: []tls.Certificate{r.pki.ServerCert(t, name)}}}
		go srv.ServeTLS(ln, "", "")
		t.Cleanup(func() { srv.Close() })
	}
	serve("198.18.0.10:443", "api.example.test", "api")
	serve("198.18.0.11:443", "blocked.example.test", "blocked")
	serveTCP(t, "198.18.0.10:7000", "plain hello\n")

	inVM := r.run
	if out, err := inVM("getent", "hosts", "api.example.test"); err != nil || !strings.HasPrefix(out, "198.18.0.10") {
		t.Fatalf("DNS through the gateway: %v %s", err, out)
	}
	// DNS over TCP to the gateway, as resolvers do for large answers.
	if out, err := inVM("bash", "-c", `printf '\x00\x22\x12\x34\x01\x00\x00\x01\x00\x00\x00\x00\x00\x00\x03api\x07example\x04test\x00\x00\x01\x00\x01' | timeout 5 bash -c 'exec 3<>/dev/tcp/10.78.0.1/53; cat >&3; head -c 2 <&3 | od -An -tu1'`); err != nil || strings.TrimSpace(out) == "" {
		t.Fatalf("DNS over TCP: %v %q", err, out)
	}
	if out, err := inVM("curl", "-sS", "--max-time", "10", "--cacert", r.caFile, "https://api.example.test/"); err != nil || out != "api GET api.example.test" {
		t.Fatalf("allowed HTTPS: %v %s", err, out)
	}
	if out, _ := inVM("curl", "-sS", "--max-time", "10", "--cacert", r.caFile, "-X", "POST", "https://api.example.test/"); !strings.Contains(out, "POST to api.example.test blocked by guardrails") {
		t.Fatalf("read-only rule through the stack: %s", out)
	}
	if out, err := inVM("curl", "-sS", "--max-time", "10", "--cacert", r.caFile, "https://blocked.example.test/"); err == nil {
		t.Fatalf("denied host reached: %s", out)
	}
	if out, err := inVM("bash", "-c", "timeout 5 cat < /dev/tcp/198.18.0.10/7000"); err != nil || out != "plain hello\n" {
		t.Fatalf("plain TCP flow: %v %q", err, out)
	}
	if out, err := inVM("bash", "-c", "timeout 5 bash -c 'exec 3<>/dev/tcp/10.78.0.1/22'"); err == nil {
		t.Fatalf("the gateway answered on port 22: %s", out)
	}
	if out, err := inVM("bash", "-c", fmt.Sprintf("timeout 5 cat < /dev/tcp/10.78.0.1/%d", li.Port())); err != nil || out != "model here\n" {
		t.Fatalf("local inference through the gateway: %v %q", err, out)
	}
	var l4 []string
	for _, e := range r.dec.all() {
		if e.Layer == audit.LayerL4 {
			l4 = append(l4, e.Action+" "+e.IP+":"+fmt.Sprint(e.Port))
		}
	}
	for _, want := range []string{"intercept 198.18.0.10:443", "deny 198.18.0.11:443", "allow 198.18.0.10:7000"} {
		found := false
		for _, got := range l4 {
			found = found || got == want
		}
		if !found {
			t.Errorf("no l4 event %q in %v", want, l4)
		}
	}
}
