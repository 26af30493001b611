package proxy

import (
	"bufio"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"guard/firewall"
	"guard/internal/testpki"
	"guard/rules"
)

// recorder is an upstream that remembers which methods it saw.
type recorder struct {
	name string
	mu   sync.Mutex
	seen []string
}

func (rc *recorder) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	rc.mu.Lock()
	rc.seen = append(rc.seen, r.Method+" "+r.URL.Path)
	rc.mu.Unlock()
	io.Copy(io.Discard, r.Body)
	fmt.Fprintf(w, "%s %s %s", rc.name, r.Method, r.URL.Path)
}

func (rc *recorder) got() []string {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return append([]string(nil), rc.seen...)
}

// plainOnPort starts a plain HTTP server on ip:port.
func plainOnPort(t *testing.T, ip string, port int, h http.Handler) netip.AddrPort {
	ln, err := net.Listen("tcp", fmt.Sprintf("%s:%d", ip, port))
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: h}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return netip.MustParseAddrPort(ln.Addr().String())
}

// rawHTTP sends one HTTP/1.1 request over a fresh transparent connection
// whose original destination is dst, and returns the response.
func rawHTTP(t *testing.T, r *rig, dst netip.AddrPort, req string) (int, string) {
	t.Helper()
	r.divert(dst)
	c, err := net.Dial("tcp", r.transparent)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	io.WriteString(c, req)
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// TestPooledConnectionNotReusedAcrossDestinations: http.Transport pools by
// Host:port, not by the original destination; a request decided for IP B
// must not be sent over a connection dialled to IP A.
func TestPooledConnectionNotReusedAcrossDestinations(t *testing.T) {
	wiki, other := &recorder{name: "wiki"}, &recorder{name: "other"}
	a := plainOnPort(t, "127.0.0.2", 0, wiki)
	b := plainOnPort(t, "127.0.0.3", int(a.Port()), other)
	names := staticNames{a.Addr(): {"wiki.test"}, b.Addr(): {"other.test"}}
	r := startRig(t, rigOptions{rules: "deny web wiki.test POST,PUT,DELETE\nallow any 127.0.0.2\nallow any 127.0.0.3\ndefault allow\n", names: names})

	// Control: POST straight at the wiki is refused.
	code, body := rawHTTP(t, r, a, "POST /direct HTTP/1.1\r\nHost: wiki.test\r\nContent-Length: 1\r\n\r\nx")
	t.Logf("control POST to wiki: %d %s", code, body)
	if code != 403 {
		t.Fatalf("control: %d", code)
	}
	// Step 1: a GET to the wiki's address with a made-up Host parks an
	// upstream connection to 127.0.0.2 under "http|zzz.test:port".
	code, body = rawHTTP(t, r, a, "GET /prime HTTP/1.1\r\nHost: zzz.test\r\n\r\n")
	t.Logf("prime: %d %s", code, body)
	time.Sleep(100 * time.Millisecond)
	// Step 2: a POST on a connection to a different, allowed address with
	// the same Host is decided for 127.0.0.3 but reuses the parked
	// connection.
	code, body = rawHTTP(t, r, b, "POST /smuggled HTTP/1.1\r\nHost: zzz.test\r\nContent-Length: 4\r\n\r\ndata")
	t.Logf("POST via other: %d %s", code, body)
	t.Logf("wiki saw %v; other saw %v", wiki.got(), other.got())
	for _, s := range wiki.got() {
		if strings.HasPrefix(s, "POST") {
			t.Errorf("wiki (deny web ... POST) received %q through a pooled connection", s)
		}
	}
	if got := other.got(); len(got) != 1 || got[0] != "POST /smuggled" {
		t.Errorf("the POST should have gone to the address it was decided for; other saw %v", got)
	}
}

// TestPooledTLSConnectionNotReusedAcrossDestinations: the same over TLS
// when the Host's certificate is served on both
// addresses and an IP web rule restricts one of them.
func TestPooledTLSConnectionNotReusedAcrossDestinations(t *testing.T) {
	pki := testpki.New(t)
	ra, rb := &recorder{name: "A"}, &recorder{name: "B"}
	ua := startUpstream(t, pki, "127.0.0.2", "shared.test", ra)
	// Same port on another address.
	ln, err := net.Listen("tcp", fmt.Sprintf("127.0.0.3:%d", ua.addr.Port()))
	if err != nil {
		t.Fatal(err)
	}
	srvB := &http.Server{Handler: rb, TLSConfig: &tls.Config{Certificates: []tls.Certificate{pki.ServerCert(t, "shared.test")}}}
	go srvB.ServeTLS(ln, "", "")
	t.Cleanup(func() { srvB.Close() })
	bAddr := netip.MustParseAddrPort(ln.Addr().String())

	r := startRig(t, rigOptions{rules: "deny web 127.0.0.2 POST\nallow any 127.0.0.3\ndefault allow\n", upstreamCAs: pki.Pool})
	u := fmt.Sprintf("https://shared.test:%d/", ua.addr.Port())
	cA := r.transparentClient(ua.addr, false)
	resp, err := cA.Post(u+"direct", "text/plain", strings.NewReader("x"))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	t.Logf("control POST to A: %d", resp.StatusCode)
	resp, err = cA.Get(u + "prime")
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	cB := r.transparentClient(bAddr, false)
	resp, err = cB.Post(u+"smuggled", "text/plain", strings.NewReader("x"))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	t.Logf("POST via B: %d %s; A saw %v; B saw %v", resp.StatusCode, b, ra.got(), rb.got())
	for _, s := range ra.got() {
		if strings.HasPrefix(s, "POST") {
			t.Errorf("A (deny web 127.0.0.2 POST) received %q", s)
		}
	}
	if got := rb.got(); len(got) != 1 || got[0] != "POST /smuggled" {
		t.Errorf("the POST should have gone to B; B saw %v", got)
	}
}

// 0.0.0.0 and [::] reach the host's loopback services past a loopback
// deny.
func TestUnspecifiedAddressCannotReachLoopback(t *testing.T) {
	secret := &recorder{name: "host-loopback-service"}
	lp := plainOnPort(t, "127.0.0.1", 0, secret)
	r := startRig(t, rigOptions{rules: "deny any 127.0.0.0/8\ndeny any ::1\ndefault allow\n"})
	for _, host := range []string{"127.0.0.1", "localhost", "0.0.0.0", "[::ffff:0.0.0.0]"} {
		c, _ := net.Dial("tcp", r.explicit)
		c.SetDeadline(time.Now().Add(5 * time.Second))
		fmt.Fprintf(c, "GET http://%s:%d/explicit HTTP/1.1\r\nHost: x\r\n\r\n", host, lp.Port())
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		c.Close()
		t.Logf("explicit %s: %d %s", host, resp.StatusCode, b)
	}
	// Transparent: a diverted flow whose original destination is 0.0.0.0.
	code, body := rawHTTP(t, r, netip.AddrPortFrom(netip.MustParseAddr("0.0.0.0"), lp.Port()), "GET /transparent HTTP/1.1\r\nHost: 0.0.0.0\r\n\r\n")
	t.Logf("transparent 0.0.0.0: %d %s", code, body)
	if len(secret.got()) > 0 {
		t.Errorf("loopback service reached despite deny any 127.0.0.0/8: %v", secret.got())
	}
}

// an Upgrade the upstream accepts turns into an unchecked tunnel:
// later requests on it skip method rules and guardrails.
func TestUpgradeTunnelCannotSkipMethodRules(t *testing.T) {
	pki := testpki.New(t)
	var mu sync.Mutex
	var tunnelled []string
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Upgrade") == "" {
			fmt.Fprint(w, "plain")
			return
		}
		c, brw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			return
		}
		defer c.Close()
		fmt.Fprintf(brw, "HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: %s\r\n\r\n", r.Header.Get("Upgrade"))
		brw.Flush()
		// Serve further HTTP/1.1 requests on the upgraded connection, as
		// an h2c- or "Upgrade: anything"-happy backend would.
		for {
			req, err := http.ReadRequest(brw.Reader)
			if err != nil {
				return
			}
			b, _ := io.ReadAll(req.Body)
			mu.Lock()
			tunnelled = append(tunnelled, fmt.Sprintf("%s %s body=%q", req.Method, req.URL.Path, b))
			mu.Unlock()
			fmt.Fprintf(brw, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
			brw.Flush()
		}
	})
	uln, err := net.Listen("tcp", "127.0.0.2:0")
	if err != nil {
		t.Fatal(err)
	}
	usrv := &http.Server{Handler: h, TLSConfig: &tls.Config{Certificates: []tls.Certificate{pki.ServerCert(t, "ro.example.test")}, NextProtos: []string{"http/1.1"}},
		TLSNextProto: map[string]func(*http.Server, *tls.Conn, http.Handler){}} // an HTTP/1.1-only backend
	go usrv.ServeTLS(uln, "", "")
	t.Cleanup(func() { usrv.Close() })
	up := &upstream{addr: netip.MustParseAddrPort(uln.Addr().String()), name: "ro.example.test"}
	r := startRig(t, rigOptions{rules: "allow web ro.example.test read-only\ndefault deny\n",
		hosts: map[string]string{"ro.example.test": "127.0.0.2"}, names: staticNames{up.addr.Addr(): {"ro.example.test"}},
		upstreamCAs: pki.Pool})
	r.divert(up.addr)
	raw, err := net.Dial("tcp", r.transparent)
	if err != nil {
		t.Fatal(err)
	}
	c := tls.Client(raw, &tls.Config{ServerName: "ro.example.test", RootCAs: r.caPool, NextProtos: []string{"http/1.1"}})
	c.SetDeadline(time.Now().Add(10 * time.Second))
	defer c.Close()
	br := bufio.NewReader(c)
	// Control: DELETE is refused.
	fmt.Fprintf(c, "DELETE /repo HTTP/1.1\r\nHost: ro.example.test\r\n\r\n")
	resp, _ := http.ReadResponse(br, nil)
	t.Logf("control DELETE: %d", resp.StatusCode)
	c.Close()

	raw, _ = net.Dial("tcp", r.transparent)
	c = tls.Client(raw, &tls.Config{ServerName: "ro.example.test", RootCAs: r.caPool, NextProtos: []string{"http/1.1"}})
	c.SetDeadline(time.Now().Add(10 * time.Second))
	br = bufio.NewReader(c)
	fmt.Fprintf(c, "GET /u HTTP/1.1\r\nHost: ro.example.test\r\nConnection: Upgrade\r\nUpgrade: h2c-or-anything\r\n\r\n")
	resp, err = http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("upgrade: %d", resp.StatusCode)
	fmt.Fprintf(c, "DELETE /repo HTTP/1.1\r\nHost: ro.example.test\r\n\r\n")
	resp, err = http.ReadResponse(br, nil)
	if err == nil {
		resp.Body.Close()
	}
	fmt.Fprintf(c, "POST /exfil HTTP/1.1\r\nHost: ro.example.test\r\nContent-Length: 6\r\n\r\nsecret")
	resp, err = http.ReadResponse(br, nil)
	if err == nil {
		resp.Body.Close()
	}
	mu.Lock()
	defer mu.Unlock()
	t.Logf("upstream saw through the tunnel: %v", tunnelled)
	if len(tunnelled) > 0 {
		t.Errorf("read-only rule bypassed after Upgrade: %v", tunnelled)
	}
	nHTTP := 0
	for _, e := range r.events.all() {
		if e.Layer == "http" {
			nHTTP++
			t.Logf("event: %s %s %s", e.Action, e.Method, e.Host)
		}
	}
}

// a dial refused by the rules is answered 403 but the timeline says allow.
func TestDialRefusalIsRecordedAsDeny(t *testing.T) {
	w := newWorld(t)
	internal := startUpstream(t, w.pki, "127.0.0.9", "rebind.example.test", echoHandler("internal"))
	w.hosts["rebind.example.test"] = "127.0.0.9"
	r := w.rig(t, "deny any 127.0.0.9\nallow tcp rebind.example.test\ndefault deny\n")
	c, _ := net.Dial("tcp", r.explicit)
	c.SetDeadline(time.Now().Add(5 * time.Second))
	fmt.Fprintf(c, "GET http://rebind.example.test:%d/ HTTP/1.1\r\nHost: x\r\n\r\n", internal.addr.Port())
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	c.Close()
	t.Logf("response: %d %s", resp.StatusCode, b)
	deny := false
	for _, e := range r.events.all() {
		t.Logf("event: layer=%s action=%s host=%s ip=%s rule=%+v reason=%q", e.Layer, e.Action, e.Host, e.IP, *e.Rule, e.Reason)
		if e.Action == "deny" {
			deny = true
		}
	}
	if resp.StatusCode == 403 && !deny {
		t.Errorf("request blocked at dial but only an allow event was recorded")
	}
}

// bytes sent right behind CONNECT are dropped by goproxy's
// ConnectHijack, so the handshake stalls.
func TestPipelinedClientHelloAfterConnect(t *testing.T) {
	w := newWorld(t)
	r := w.rig(t, "default allow\n")
	hello := captureHello(t, &tls.Config{ServerName: "api.example.test"})
	c, _ := net.Dial("tcp", r.explicit)
	defer c.Close()
	c.SetDeadline(time.Now().Add(15 * time.Second))
	target := fmt.Sprintf("api.example.test:%d", w.api.addr.Port())
	start := time.Now()
	c.Write(append([]byte(fmt.Sprintf("CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", target, target)), hello...))
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("CONNECT: %d", resp.StatusCode)
	buf := make([]byte, 5)
	_, err = io.ReadFull(br, buf)
	t.Logf("after %v: first bytes %x err %v", time.Since(start), buf, err)
	if err != nil {
		t.Errorf("pipelined ClientHello lost after CONNECT (%v after %v)", err, time.Since(start))
	}
}

// explicitGet sends an absolute-form request to the explicit listener.
func explicitGet(t *testing.T, r *rig, u string) (int, string) {
	t.Helper()
	c, err := net.Dial("tcp", r.explicit)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	fmt.Fprintf(c, "GET %s HTTP/1.1\r\nHost: x\r\n\r\n", u)
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// TestPolicyChangeRetiresBusyConnections: a connection busy while the
// policy changes goes back to the idle pool
// afterwards and is reused for an address the new policy denies.
func TestPolicyChangeRetiresBusyConnections(t *testing.T) {
	rec := &recorder{name: "internal"}
	slow := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/slow" {
			time.Sleep(500 * time.Millisecond)
		}
		rec.ServeHTTP(w, r)
	})
	a := plainOnPort(t, "127.0.0.2", 0, slow)
	r := startRig(t, rigOptions{rules: "allow any 127.0.0.0/8\ndefault allow\n", hosts: map[string]string{"plain.test": "127.0.0.2"}})
	u := fmt.Sprintf("http://plain.test:%d", a.Port())
	done := make(chan struct{})
	go func() {
		defer close(done)
		code, body := explicitGet(t, r, u+"/slow")
		t.Logf("slow: %d %s", code, body)
	}()
	time.Sleep(150 * time.Millisecond)
	pol, _ := rules.ParseString("deny any 127.0.0.2\nallow any 127.0.0.0/8\ndefault allow\n")
	r.p.cfg.Policy.(*firewall.Active).Swap(firewall.Compile(pol))
	r.p.PolicyChanged()
	<-done
	code, body := explicitGet(t, r, u+"/after-deny")
	t.Logf("after deny: %d %s; upstream saw %v", code, body, rec.got())
	for _, s := range rec.got() {
		if strings.Contains(s, "after-deny") {
			t.Errorf("request reached 127.0.0.2 after 'deny any 127.0.0.2' was applied")
		}
	}
	if got := rec.got(); len(got) == 0 || got[0] != "GET /slow" {
		t.Errorf("the request before the change should have reached the upstream: %v", got)
	}
}

// TestPolicyChangeRetiresReturningConnections: as above, but any other
// request in between resets http.Transport's
// closeIdle flag; and over HTTP/2 a busy connection is never closed.
func TestPolicyChangeRetiresReturningConnections(t *testing.T) {
	rec := &recorder{name: "internal"}
	slow := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/slow" {
			time.Sleep(500 * time.Millisecond)
		}
		rec.ServeHTTP(w, r)
	})
	a := plainOnPort(t, "127.0.0.2", 0, slow)
	other := plainOnPort(t, "127.0.0.3", 0, &recorder{name: "other"})
	r := startRig(t, rigOptions{rules: "allow any 127.0.0.0/8\ndefault allow\n", hosts: map[string]string{"plain.test": "127.0.0.2", "other.test": "127.0.0.3"}})
	u := fmt.Sprintf("http://plain.test:%d", a.Port())
	done := make(chan struct{})
	go func() {
		defer close(done)
		explicitGet(t, r, u+"/slow")
	}()
	time.Sleep(150 * time.Millisecond)
	pol, _ := rules.ParseString("deny any 127.0.0.2\nallow any 127.0.0.0/8\ndefault allow\n")
	r.p.cfg.Policy.(*firewall.Active).Swap(firewall.Compile(pol))
	r.p.PolicyChanged()
	explicitGet(t, r, fmt.Sprintf("http://other.test:%d/unrelated", other.Port()))
	<-done
	code, body := explicitGet(t, r, u+"/after-deny")
	t.Logf("h1 after deny: %d %s; upstream saw %v", code, body, rec.got())
	for _, s := range rec.got() {
		if strings.Contains(s, "after-deny") {
			t.Errorf("request reached 127.0.0.2 after 'deny any 127.0.0.2' was applied")
		}
	}
	if got := rec.got(); len(got) == 0 || got[0] != "GET /slow" {
		t.Errorf("the request before the change should have reached the upstream: %v", got)
	}

	// HTTP/2 upstream with a long request in flight.
	pki := testpki.New(t)
	rec2 := &recorder{name: "h2internal"}
	h2 := startUpstream(t, pki, "127.0.0.4", "h2.test", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/longpoll" {
			time.Sleep(800 * time.Millisecond)
		}
		rec2.ServeHTTP(w, r)
	}))
	r2 := startRig(t, rigOptions{rules: "allow any 127.0.0.0/8\ndefault allow\n", hosts: map[string]string{"h2.test": "127.0.0.4"}, upstreamCAs: pki.Pool})
	u2 := fmt.Sprintf("https://h2.test:%d", h2.addr.Port())
	done2 := make(chan struct{})
	go func() { defer close(done2); explicitGet(t, r2, u2+"/longpoll") }()
	time.Sleep(200 * time.Millisecond)
	r2.p.cfg.Policy.(*firewall.Active).Swap(firewall.Compile(must(rules.ParseString("deny any 127.0.0.4\nallow any 127.0.0.0/8\ndefault allow\n"))))
	r2.p.PolicyChanged()
	code, body = explicitGet(t, r2, u2+"/after-deny")
	<-done2
	t.Logf("h2 after deny: %d %s; upstream saw %v", code, body, rec2.got())
	for _, s := range rec2.got() {
		if strings.Contains(s, "after-deny") {
			t.Errorf("request reached 127.0.0.4 after 'deny any 127.0.0.4' was applied")
		}
	}
	if got := rec2.got(); len(got) == 0 || got[0] != "GET /longpoll" {
		t.Errorf("the request before the change should have reached the upstream: %v", got)
	}
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

// TestTunnelAndAbsoluteFormInsideInterception: absolute-form targets,
// userinfo tricks, duplicate Hosts and TRACE inside an intercepted TLS
// connection are refused, and so is an h2 CONNECT stream.
func TestTunnelAndAbsoluteFormInsideInterception(t *testing.T) {
	w := newWorld(t)
	r := w.rig(t, "deny web api.example.test PUT,DELETE\ndefault allow\n")
	r.divert(w.api.addr)
	for _, req := range []string{
		"GET https://other.example.test/x HTTP/1.1\r\nHost: api.example.test\r\n\r\n",
		"GET https://api.example.test@other.example.test/x HTTP/1.1\r\nHost: api.example.test\r\n\r\n",
		"GET /x HTTP/1.1\r\nHost: api.example.test\r\nHost: other.example.test\r\n\r\n",
		"TRACE /x HTTP/1.1\r\nHost: api.example.test\r\n\r\n",
	} {
		raw, _ := net.Dial("tcp", r.transparent)
		c := tls.Client(raw, &tls.Config{ServerName: "api.example.test", RootCAs: r.caPool})
		c.SetDeadline(time.Now().Add(5 * time.Second))
		io.WriteString(c, req)
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		c.Close()
		if err == nil && resp.StatusCode < 400 {
			t.Errorf("%q passed: %d", strings.SplitN(req, "\r\n", 2)[0], resp.StatusCode)
		}
	}
	// A CONNECT stream inside the intercepted HTTP/2 connection would be a
	// tunnel past every later check.
	c := r.transparentClient(w.api.addr, true)
	pr, pw := io.Pipe()
	req, _ := http.NewRequest("CONNECT", url(w.api, ""), pr)
	req.URL.Path = ""
	go func() { io.WriteString(pw, "tunnel bytes"); pw.Close() }()
	resp, err := c.Do(req)
	if err == nil && resp.StatusCode != http.StatusMethodNotAllowed {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("h2 CONNECT -> %s %d %s", resp.Proto, resp.StatusCode, b)
	}
}

// on a transparent connection the pass-through decision trusts the SNI
// alone: a pass-through name on the TLS hello of a connection to any other
// L4-allowed address gets a raw, uninspected tunnel to that address.
func TestPassThroughNameOnAnotherAddressIsIntercepted(t *testing.T) {
	w := newWorld(t)
	r := w.rig(t, "allow tcp api.example.test\nallow tcp pinned.example.test\ndefault deny\n")
	r.divert(w.api.addr) // the VM dials api.example.test's address...
	raw, err := net.Dial("tcp", r.transparent)
	if err != nil {
		t.Fatal(err)
	}
	// ...but names the pass-through host in SNI, and does not care whose
	// certificate comes back.
	// Guard's CA verifies the leaf only if guard intercepted instead of
	// splicing to the address's real server.
	c := tls.Client(raw, &tls.Config{ServerName: "pinned.example.test", RootCAs: r.caPool, NextProtos: []string{"http/1.1"}})
	c.SetDeadline(time.Now().Add(5 * time.Second))
	defer c.Close()
	if err := c.Handshake(); err != nil {
		t.Fatal(err)
	}
	leaf := c.ConnectionState().PeerCertificates[0]
	t.Logf("certificate: subject=%s issuer=%s", leaf.Subject, leaf.Issuer)
	io.WriteString(c, "POST /write HTTP/1.1\r\nHost: api.example.test\r\nContent-Length: 4\r\n\r\ndata")
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	t.Logf("response: %d %s", resp.StatusCode, b)
	httpEvents := 0
	for _, e := range r.events.all() {
		t.Logf("event layer=%s action=%s host=%s ip=%s", e.Layer, e.Action, e.Host, e.IP)
		if e.Layer == "http" {
			httpEvents++
		}
	}
	if strings.HasPrefix(string(b), "api POST") || httpEvents == 0 || resp.StatusCode != 403 {
		t.Errorf("request to api.example.test through a pass-through name: %d %s, %d http events", resp.StatusCode, b, httpEvents)
	}
}
