package netstack

import (
	"bytes"
	"cmp"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"guard/audit"
	"guard/firewall"
	"guard/internal/testgit"
	"guard/internal/testnet"
	"guard/internal/testpki"
	"guard/proxy"
	"guard/rules"
)

// agentRig is a namespace whose only network is guard's stack on an
// AF_PACKET link, with the transparent proxy and the gateway DNS, as
// guardd --vm afpacket wires them.
type agentRig struct {
	ns     string
	active *firewall.Active
	dec    *decider
	pki    *testpki.CA
	caFile string // the guard CA, for the VM's clients
}

// agentOptions vary the rig: the veth MTU (1500 when 0), and transparent
// interception turned off.
type agentOptions struct {
	mtu          int
	interceptOff bool
	// localInference is the host's model server, reached at the gateway's
	// address on its port and allowed by the exemption.
	localInference netip.AddrPort
}

func newAgentRig(t *testing.T, rulesText string, static map[string]string, opts agentOptions) *agentRig {
	t.Helper()
	mtu := cmp.Or(opts.mtu, 1500)
	ns, hostIf := testnet.VM(t, netip.MustParsePrefix("10.78.0.2/24"), netip.MustParseAddr("10.78.0.1"))
	if mtu != 1500 {
		testnet.SetMTU(t, ns, hostIf, mtu)
	}
	pki := testpki.New(t)
	pol, err := rules.ParseString(rulesText)
	if err != nil {
		t.Fatal(err)
	}
	var exemptions []firewall.Exemption
	if li := opts.localInference; li.IsValid() {
		exemptions = append(exemptions, firewall.Exemption{Origin: "localInference", Rule: rules.Rule{Action: rules.Allow, Proto: rules.TCP,
			Target: rules.Target{Kind: rules.Prefix, Prefix: netip.PrefixFrom(li.Addr(), 32)}, Ports: rules.PortSet{{Lo: li.Port(), Hi: li.Port()}}}})
	}
	active := firewall.NewActive(firewall.Compile(pol, exemptions...))
	dec := &decider{active: active}
	snoop := firewall.NewSnoopTable(firewall.SnoopOptions{})
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	ca, err := proxy.LoadOrCreateCA(t.TempDir(), "vm", 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	px, err := proxy.New(proxy.Config{CA: ca, Policy: active, Events: dec, Snoop: snoop, UpstreamRoots: pki.Pool, StaticHosts: static, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	go px.Run(ctx)
	gw := NewDNSGateway(DNSConfig{Static: static, Snoop: snoop, Policy: active, Logger: quiet})
	ep, closeEP, err := OpenAFPacket(hostIf, uint32(mtu))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { closeEP() })
	pinger, err := NewHostPinger()
	if err != nil {
		t.Fatal(err)
	}
	st, err := New(Config{Gateway: netip.MustParsePrefix("10.78.0.1/24"), Decide: dec, Names: snoop, Proxy: px, DNS: gw,
		Intercept: !opts.interceptOff, Pinger: pinger, Policy: active, Events: dec, LocalInference: opts.localInference, Logger: quiet}, ep)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(st.Close)
	caFile := filepath.Join(t.TempDir(), "ca.pem")
	os.WriteFile(caFile, ca.CertificatePEM(), 0o644)
	return &agentRig{ns: ns, active: active, dec: dec, pki: pki, caFile: caFile}
}

func (r *agentRig) run(args ...string) (string, error) { return testnet.InVM(r.ns, args...) }

// serveStream serves HTTPS on addr that streams a line every 100 ms until
// the client goes, as a long poll or an event stream does.
func serveStream(t *testing.T, addr string, cert tls.Certificate) {
	t.Helper()
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		for req.Context().Err() == nil {
			io.WriteString(w, "tick\n")
			w.(http.Flusher).Flush()
			time.Sleep(100 * time.Millisecond)
		}
	}), TLSConfig: &tls.Config{Certificates: []tls.Certificate{cert}}}
	go srv.ServeTLS(ln, "", "")
	t.Cleanup(func() { srv.Close() })
}

// serveUDPEcho answers every datagram to addr with prefix and the datagram.
func serveUDPEcho(t *testing.T, addr, prefix string) {
	t.Helper()
	pc, err := net.ListenPacket("udp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pc.Close() })
	go func() {
		buf := make([]byte, 1500)
		for {
			n, from, err := pc.ReadFrom(buf)
			if err != nil {
				return
			}
			pc.WriteTo(append([]byte(prefix), buf[:n]...), from)
		}
	}()
}

// serveTCP answers every connection to addr with reply.
func serveTCP(t *testing.T, addr, reply string) {
	t.Helper()
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			io.WriteString(c, reply)
			c.Close()
		}
	}()
}

// TestPingIsAnsweredOnlyByTheDestination: the real ping in the VM gets
// echo replies from an allowed destination that answers, "Packet
// filtered" from a denied one, and silence from an allowed one that does
// not answer: the stack never fakes a reply.
func TestPingIsAnsweredOnlyByTheDestination(t *testing.T) {
	testnet.HostAddresses(t, "198.18.0.50", "198.18.0.51")
	// A host that ignores pings: a second namespace, routed from the host.
	silentNS, silentIf := testnet.VM(t, netip.MustParsePrefix("10.82.0.2/24"), netip.MustParseAddr("10.82.0.1"))
	testnet.Run(t, "ip", "addr", "add", "10.82.0.1/24", "dev", silentIf)
	testnet.Run(t, "ip", "netns", "exec", silentNS, "sysctl", "-q", "-w", "net.ipv4.icmp_echo_ignore_all=1")
	r := newAgentRig(t, "allow any 198.18.0.50\nallow any 10.82.0.2\ndefault deny\n", nil, agentOptions{})

	if out, err := r.run("ping", "-c", "2", "-W", "5", "198.18.0.50"); err != nil || !strings.Contains(out, "2 received") {
		t.Fatalf("allowed ping: %v\n%s", err, out)
	}
	if out, err := r.run("ping", "-c", "1", "-W", "3", "198.18.0.51"); err == nil || !strings.Contains(out, "filtered") {
		t.Fatalf("denied ping: %v\n%s", err, out)
	}
	// 10.82.0.2 is allowed but does not answer.
	if out, err := r.run("ping", "-c", "1", "-W", "3", "10.82.0.2"); err == nil || !strings.Contains(out, "0 received") {
		t.Fatalf("an unanswered destination got a reply: %v\n%s", err, out)
	}
	// The gateway answers for itself.
	if out, err := r.run("ping", "-c", "1", "-W", "3", "10.78.0.1"); err != nil {
		t.Fatalf("gateway ping: %v\n%s", err, out)
	}
	var icmpEvents []string
	for _, e := range r.dec.all() {
		if e.Proto == "icmp" {
			icmpEvents = append(icmpEvents, e.Action+" "+e.IP)
		}
	}
	// Two echoes of one ping session are one decision.
	if strings.Join(icmpEvents, ",") != "allow 198.18.0.50,deny 198.18.0.51,allow 10.82.0.2" {
		t.Fatalf("icmp events: %v", icmpEvents)
	}
}

// TestUDPExchangeThroughTheStack: a real UDP client in the VM talks to an
// allowed host-side UDP server, and gets port unreachable from a denied one.
func TestUDPExchangeThroughTheStack(t *testing.T) {
	testnet.HostAddresses(t, "198.18.0.52")
	for _, port := range []string{"7100", "7101"} {
		serveUDPEcho(t, "198.18.0.52:"+port, "echo ")
	}
	r := newAgentRig(t, "allow udp 198.18.0.52:7100\ndefault deny\n", nil, agentOptions{})
	exchange := func(port string) (string, error) {
		return r.run("bash", "-c", "exec 3<>/dev/udp/198.18.0.52/"+port+"; printf hi >&3; timeout 3 head -c 7 <&3")
	}
	if out, err := exchange("7100"); err != nil || out != "echo hi" {
		t.Fatalf("allowed UDP: %v %q", err, out)
	}
	if out, err := exchange("7101"); err == nil {
		t.Fatalf("denied UDP answered: %q", out)
	}
}

// TestHostServicesAreUnreachable: "default allow" opens the world, not the
// host: a service on one of the host's own addresses is refused to TCP,
// to the proxy's ports and to ping, until a rule names it.
func TestHostServicesAreUnreachable(t *testing.T) {
	testnet.HostAddresses(t, "198.18.0.53", "198.18.0.54")
	serveTCP(t, "198.18.0.53:7200", "host service\n")
	serveTCP(t, "198.18.0.54:7200", "named service\n")
	r := newAgentRig(t, "allow tcp 198.18.0.54:7200\ndefault allow\n", nil, agentOptions{})

	if out, err := r.run("bash", "-c", "timeout 5 cat < /dev/tcp/198.18.0.53/7200"); err == nil {
		t.Fatalf("host service reached under default allow: %q", out)
	}
	if out, err := r.run("curl", "-sS", "--max-time", "5", "http://198.18.0.53:80/"); err == nil {
		t.Fatalf("host port 80 reached: %q", out)
	}
	if out, err := r.run("ping", "-c", "1", "-W", "3", "198.18.0.53"); err == nil {
		t.Fatalf("host pinged: %s", out)
	}
	if out, err := r.run("bash", "-c", "timeout 5 cat < /dev/tcp/198.18.0.54/7200"); err != nil || out != "named service\n" {
		t.Fatalf("a named host service: %v %q", err, out)
	}
	found := false
	for _, e := range r.dec.all() {
		found = found || (e.IP == "198.18.0.53" && e.Action == "deny" && e.Rule.Origin == firewall.OriginHostLocal)
	}
	if !found {
		t.Fatalf("no hostLocal deny event: %+v", r.dec.all())
	}
}

// TestGitCloneInTheVM: the real git client in the VM clones over HTTPS
// through the transparent proxy from git http-backend.
func TestGitCloneInTheVM(t *testing.T) {
	testnet.HostAddresses(t, "198.18.0.55")
	root := testgit.SeededRepo(t, "repo.git", "cloned through guard\n")
	r := newAgentRig(t, "allow web git.example.test\ndefault deny\n", map[string]string{"git.example.test": "198.18.0.55"}, agentOptions{})
	ln, err := net.Listen("tcp", "198.18.0.55:443")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: testgit.Backend(t, root), TLSConfig: &tls.Config{Certificates: []tls.Certificate{r.pki.ServerCert(t, "git.example.test")}}}
	go srv.ServeTLS(ln, "", "")
	t.Cleanup(func() { srv.Close() })

	work := t.TempDir()
	clone := filepath.Join(work, "clone")
	if out, err := r.run("env", "HOME="+work, "GIT_CONFIG_NOSYSTEM=1", "GIT_SSL_CAINFO="+r.caFile,
		"git", "clone", "-q", "https://git.example.test/repo.git", clone); err != nil {
		t.Fatalf("git clone in the VM: %v\n%s", err, out)
	}
	if b, err := os.ReadFile(filepath.Join(clone, "README")); err != nil || string(b) != "cloned through guard\n" {
		t.Fatalf("clone: %q %v", b, err)
	}
}

// TestInterceptionOffStillDecidesSNI: with transparentInterception off,
// TLS on 443 is spliced undecrypted (the client sees the server's own
// certificate), but the server name is still decided: a denied name is cut
// even on an allowed address, and a name that is not one the VM resolved
// for the address it dialled (fronting) is refused.
func TestInterceptionOffStillDecidesSNI(t *testing.T) {
	testnet.HostAddresses(t, "198.18.0.56")
	r := newAgentRig(t, "deny tcp denied.example.test\nallow tcp 198.18.0.56:443\ndefault deny\n",
		map[string]string{"ok.example.test": "198.18.0.56"}, agentOptions{interceptOff: true})
	ln, err := net.Listen("tcp", "198.18.0.56:443")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		io.WriteString(w, "spliced "+req.Host)
	}), TLSConfig: &tls.Config{Certificates: []tls.Certificate{r.pki.ServerCert(t, "ok.example.test", "denied.example.test", "other.example.test")}}}
	go srv.ServeTLS(ln, "", "")
	t.Cleanup(func() { srv.Close() })
	upstreamCA := filepath.Join(t.TempDir(), "upstream.pem")
	os.WriteFile(upstreamCA, r.pki.PEM, 0o644)
	curl := func(args ...string) (string, error) {
		return r.run(append([]string{"curl", "-sS", "--max-time", "10", "--cacert", upstreamCA}, args...)...)
	}
	// The upstream's own certificate verifies: nothing was decrypted.
	if out, err := curl("https://ok.example.test/"); err != nil || out != "spliced ok.example.test" {
		t.Fatalf("spliced HTTPS: %v %s", err, out)
	}
	// The VM resolved only ok.example.test for the address; the names below
	// ride on it with --resolve.
	if out, err := curl("--resolve", "denied.example.test:443:198.18.0.56", "https://denied.example.test/"); err == nil {
		t.Fatalf("denied server name spliced: %s", out)
	}
	if out, err := curl("--resolve", "other.example.test:443:198.18.0.56", "https://other.example.test/"); err == nil {
		t.Fatalf("a server name the VM never resolved was spliced: %s", out)
	}
	var sni []string
	for _, e := range r.dec.all() {
		if e.Layer == audit.LayerSNI {
			sni = append(sni, e.Action+" "+e.Host)
		}
	}
	want := []string{"allow ok.example.test", "deny denied.example.test", "deny other.example.test"}
	if strings.Join(sni, ",") != strings.Join(want, ",") {
		t.Fatalf("sni events %v, want %v", sni, want)
	}
}

// TestPolicyChangeCutsOpenFlows: a rules change is how a person stops an
// agent, so a long-lived flow the new policy denies is cut at once (plain
// TCP, UDP and an HTTPS connection held in the proxy), while flows it still
// allows stay open.
func TestPolicyChangeCutsOpenFlows(t *testing.T) {
	testnet.HostAddresses(t, "198.18.0.57", "198.18.0.58")
	const allowAll = "allow any 198.18.0.57\nallow any 198.18.0.58\ndefault deny\n"
	r := newAgentRig(t, allowAll, map[string]string{"agent.example.test": "198.18.0.57"}, agentOptions{})
	// Servers that hold the connection open until the client goes.
	hold := func(addr string) {
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { ln.Close() })
		go func() {
			for {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				go func() { io.WriteString(c, "open\n"); io.Copy(io.Discard, c); c.Close() }()
			}
		}()
	}
	hold("198.18.0.57:7300")
	hold("198.18.0.58:7300")
	serveUDPEcho(t, "198.18.0.57:7301", "")
	// The HTTPS server streams until the client goes, as a long poll or an
	// event stream does.
	serveStream(t, "198.18.0.57:443", r.pki.ServerCert(t, "agent.example.test"))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// Each client runs in the VM and prints "ended" when its flow ends.
	start := func(script string) *exec.Cmd {
		cmd := exec.CommandContext(ctx, "ip", "netns", "exec", r.ns, "bash", "-c", script+"; echo ended")
		cmd.Stdout, cmd.Stderr = &bytes.Buffer{}, io.Discard
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		return cmd
	}
	tcpCut := start("cat < /dev/tcp/198.18.0.57/7300")
	tcpKept := start("cat < /dev/tcp/198.18.0.58/7300")
	udpCut := start("exec 3<>/dev/udp/198.18.0.57/7301; while printf x >&3 && timeout 2 head -c 1 <&3 >/dev/null; do sleep 0.2; done")
	httpsCut := start("curl -sSN --cacert " + r.caFile + " https://agent.example.test/stream >/dev/null")
	// Wait until all four flows are open (decided at l4), then a little
	// for them to be talking.
	for deadline := time.Now().Add(15 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		open := map[string]bool{}
		for _, e := range r.dec.all() {
			if e.Layer == audit.LayerL4 && e.Action != "deny" {
				open[fmt.Sprintf("%s %s:%d", e.Proto, e.IP, e.Port)] = true
			}
		}
		if open["tcp 198.18.0.57:7300"] && open["tcp 198.18.0.58:7300"] && open["udp 198.18.0.57:7301"] && open["tcp 198.18.0.57:443"] {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the flows never opened: %v", open)
		}
	}
	time.Sleep(500 * time.Millisecond)

	changed := time.Now()
	pol, _ := rules.ParseString("allow any 198.18.0.58\ndefault deny\n")
	r.active.Swap(firewall.Compile(pol))
	for name, cmd := range map[string]*exec.Cmd{"tcp": tcpCut, "udp": udpCut, "https": httpsCut} {
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Errorf("the %s flow outlived the policy that denies it", name)
		}
	}
	t.Logf("denied flows ended %v after the change", time.Since(changed))
	if tcpKept.ProcessState != nil {
		t.Fatal("the still-allowed flow was cut")
	}
	tcpKept.Process.Kill()
	cuts := 0
	for _, e := range r.dec.all() {
		if e.Reason == "an open flow cut by a policy change" && e.IP == "198.18.0.57" {
			cuts++
		}
		if e.Reason != "" && e.IP == "198.18.0.58" {
			t.Errorf("event for the kept flow: %+v", e)
		}
	}
	if cuts < 3 {
		t.Fatalf("%d cut events, want one per denied flow (3)", cuts)
	}
}

// TestHostEndOfTheLinkIsDeaf: guard's raw socket reads copies of the VM's
// frames, so the host's own stack on that interface must ignore them:
// no IPv6 there (the VM would reach host services at its link-local
// address), no ARP answers for the host's addresses, and IPv4 sent
// straight to its MAC dropped.
func TestHostEndOfTheLinkIsDeaf(t *testing.T) {
	testnet.HostAddresses(t, "198.18.0.59")
	ns, hostIf := testnet.VM(t, netip.MustParsePrefix("10.78.0.2/24"), netip.MustParseAddr("10.78.0.1"))
	vmIf := "gvb" + strings.TrimPrefix(hostIf, "gva")
	pol, _ := rules.ParseString("default deny\n")
	active := firewall.NewActive(firewall.Compile(pol))
	ep, closeEP, err := OpenAFPacket(hostIf, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer closeEP()
	st, err := New(Config{Gateway: netip.MustParsePrefix("10.78.0.1/24"), Decide: &decider{active: active},
		Names: firewall.NewSnoopTable(firewall.SnoopOptions{}), Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}, ep)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	udp, err := net.ListenPacket("udp4", "0.0.0.0:0")
	if err != nil {
		t.Fatal(err)
	}
	defer udp.Close()

	if out := testnet.Run(t, "ip", "-6", "addr", "show", "dev", hostIf); strings.Contains(out, "inet6") {
		t.Fatalf("the host end has IPv6:\n%s", out)
	}
	// The VM answers its own multicast ping once its address is past
	// duplicate detection; any other answer is someone on the link.
	out, _ := testnet.InVM(ns, "ping", "-6", "-c", "2", "-W", "1", "ff02::1%"+vmIf)
	own := testnet.Run(t, "ip", "-n", ns, "-6", "addr", "show", "dev", vmIf)
	for _, line := range strings.Split(out, "\n") {
		_, rest, ok := strings.Cut(line, "bytes from ")
		if !ok {
			continue
		}
		from, _, _ := strings.Cut(rest, "%")
		if !strings.Contains(own, "inet6 "+from+"/") {
			t.Fatalf("something on the link answered IPv6 (%s):\n%s", from, out)
		}
	}
	// Ask the link for a host address directly: the host end must not
	// answer with its MAC.
	hostMAC := strings.TrimSpace(testnet.Run(t, "cat", "/sys/class/net/"+hostIf+"/address"))
	testnet.Run(t, "ip", "-n", ns, "route", "add", "198.18.0.59/32", "dev", vmIf)
	testnet.InVM(ns, "ping", "-c", "1", "-W", "1", "198.18.0.59")
	if neigh := testnet.Run(t, "ip", "-n", ns, "neigh", "show", "198.18.0.59"); strings.Contains(neigh, hostMAC) {
		t.Fatalf("the host end answered ARP for a host address: %s", neigh)
	}
	// A VM that knows the MAC anyway (root in the VM) sends IPv4 to it.
	testnet.Run(t, "ip", "-n", ns, "neigh", "replace", "10.78.0.3", "lladdr", hostMAC, "dev", vmIf)
	testnet.Run(t, "ip", "-n", ns, "route", "replace", "198.18.0.59/32", "via", "10.78.0.3")
	port := udp.LocalAddr().(*net.UDPAddr).Port
	testnet.InVM(ns, "bash", "-c", fmt.Sprintf("printf injected > /dev/udp/198.18.0.59/%d", port))
	udp.SetReadDeadline(time.Now().Add(2 * time.Second))
	if n, from, err := udp.ReadFrom(make([]byte, 64)); err == nil {
		t.Fatalf("a host service got %d bytes from %v straight off the link (rp_filter all=%s)", n, from,
			strings.TrimSpace(testnet.Run(t, "sysctl", "-n", "net.ipv4.conf.all.rp_filter")))
	}
}

// TestPolicyChangeCutsSplicesByServerName: with interception off, an open
// splice is decided again by the server name it carried, not only by the
// names of its address: a rule that denies that name cuts it even when
// another name of the address is still allowed.
func TestPolicyChangeCutsSplicesByServerName(t *testing.T) {
	testnet.HostAddresses(t, "198.18.0.60")
	static := map[string]string{"ok.example.test": "198.18.0.60", "denied.example.test": "198.18.0.60"}
	r := newAgentRig(t, "allow tcp 198.18.0.60:443\ndefault deny\n", static, agentOptions{interceptOff: true})
	serveStream(t, "198.18.0.60:443", r.pki.ServerCert(t, "ok.example.test", "denied.example.test"))
	upstreamCA := filepath.Join(t.TempDir(), "upstream.pem")
	os.WriteFile(upstreamCA, r.pki.PEM, 0o644)
	for name := range static { // the VM resolves both names of the address
		if out, err := r.run("getent", "hosts", name); err != nil {
			t.Fatalf("%s: %v %s", name, err, out)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	stream := func(name string) *exec.Cmd {
		cmd := exec.CommandContext(ctx, "ip", "netns", "exec", r.ns, "curl", "-sSN", "--cacert", upstreamCA, "https://"+name+"/stream")
		cmd.Stdout, cmd.Stderr = io.Discard, io.Discard
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		return cmd
	}
	denied, kept := stream("denied.example.test"), stream("ok.example.test")
	time.Sleep(1500 * time.Millisecond)
	pol, _ := rules.ParseString("allow tcp ok.example.test\ndeny tcp denied.example.test\ndefault deny\n")
	r.active.Swap(firewall.Compile(pol))
	done := make(chan error, 1)
	go func() { done <- denied.Wait() }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("the splice to a now-denied server name stayed open")
	}
	time.Sleep(300 * time.Millisecond)
	if kept.ProcessState != nil {
		t.Fatal("the splice to a still-allowed name was cut")
	}
	kept.Process.Kill()
}
