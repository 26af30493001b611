package proxy

import (
	"bytes"
	"compress/gzip"
	"context"
	"crypto/tls"
	"encoding/base64"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"testing/iotest"

	"guard/audit"
)

const (
	testTag  = "Qx7Kp2Lm"
	testFake = "ghp_" + testTag + "AAAAAAAAAAAAAAAAAAAAAAAAAAAA"
	testReal = "ghp_REALREALREALREALREALREALREALREAL1"
)

type eventList struct {
	mu  sync.Mutex
	all []audit.Event
}

func (e *eventList) Emit(_ context.Context, ev audit.Event) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.all = append(e.all, ev)
	return nil
}

func (e *eventList) types() string {
	e.mu.Lock()
	defer e.mu.Unlock()
	var t []string
	for _, ev := range e.all {
		t = append(t, ev.Type)
	}
	return strings.Join(t, ",")
}

type approver struct{ allow bool }

func (a approver) ApproveUse(context.Context, *Credential, string) (bool, string) {
	return a.allow, "test"
}

func testSwapper(events EventSink, approve UseApprover) *Swapper {
	return NewSwapper([]*Credential{{ID: "gh", Title: "GitHub", Service: "github", Hosts: []string{"github.com"},
		Headers: []string{"X-Api-Key"}, Fake: testFake, Real: func() (string, error) { return testReal, nil }}},
		[]string{testTag}, events, approve)
}

// TestFakeOnlyBecomesRealInScope: the fake turns into the real secret only
// in its own headers, on its own hosts, over TLS; anywhere else it is a
// compromise (451), which refuses every later request until cleared.
func TestFakeOnlyBecomesRealInScope(t *testing.T) {
	basic := "Basic " + base64.StdEncoding.EncodeToString([]byte("x-access-token:"+testFake))
	for _, tc := range []struct {
		name, host, header, value string
		tls                       bool
		want                      string // "real", "fake" (untouched) or "451"
	}{
		{"bearer on the host", "api.github.com", "Authorization", "Bearer " + testFake, true, "real"},
		{"token form", "github.com", "Authorization", "token " + testFake, true, "real"},
		{"basic form", "github.com", "Authorization", basic, true, "real"},
		{"custom header", "api.github.com", "X-Api-Key", testFake, true, "real"},
		{"another header on the host", "api.github.com", "X-Other", testFake, true, "fake"},
		{"plain HTTP", "api.github.com", "Authorization", "Bearer " + testFake, false, "fake"},
		{"suffix attack", "api.github.com.evil.com", "Authorization", "Bearer " + testFake, true, "451"},
		{"look-alike", "evilgithub.com", "Authorization", "Bearer " + testFake, true, "451"},
		{"trailing dot", "github.com.", "Authorization", "Bearer " + testFake, true, "451"},
		{"the host's IP", "140.82.112.3", "Authorization", "Bearer " + testFake, true, "451"},
		{"basic to another host", "example.com", "Authorization", basic, true, "451"},
		{"in a cookie to another host", "example.com", "Cookie", "t=" + testFake, true, "451"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			events := &eventList{}
			s := testSwapper(events, nil)
			r := httptest.NewRequest("GET", "https://"+tc.host+"/x", nil)
			r.Header.Set(tc.header, tc.value)
			_, blk, err := s.Inject(context.Background(), r, Destination{Host: tc.host, TLS: tc.tls})
			if err != nil {
				t.Fatal(err)
			}
			got := r.Header.Get(tc.header)
			switch tc.want {
			case "451":
				if blk == nil || blk.Status != 451 || s.Compromised() == "" || events.types() != audit.TypeCompromise {
					t.Fatalf("not refused as a compromise: %+v %q", blk, events.types())
				}
				// Every later request is refused, even a good one.
				good := httptest.NewRequest("GET", "https://api.github.com/", nil)
				if _, blk, _ := s.Inject(context.Background(), good, Destination{Host: "api.github.com", TLS: true}); blk == nil || blk.Status != 451 {
					t.Fatal("a compromised workspace let a request through")
				}
				s.ClearCompromise()
				if _, blk, _ := s.Inject(context.Background(), good, Destination{Host: "api.github.com", TLS: true}); blk != nil {
					t.Fatal("still refused after clearing")
				}
			case "real":
				if blk != nil || !strings.Contains(decodeBasic(got), testReal) || strings.Contains(decodeBasic(got), testFake) {
					t.Fatalf("not swapped: %q %+v", got, blk)
				}
				if events.types() != audit.TypeCredUse {
					t.Fatalf("events %q", events.types())
				}
			case "fake":
				if blk != nil || got != tc.value {
					t.Fatalf("touched: %q %+v", got, blk)
				}
			}
		})
	}
}

func decodeBasic(v string) string {
	if rest, ok := strings.CutPrefix(v, "Basic "); ok {
		b, _ := base64.StdEncoding.DecodeString(rest)
		return string(b)
	}
	return v
}

func TestFakeInURLOrBodyOutOfScope(t *testing.T) {
	s := testSwapper(&eventList{}, nil)
	r := httptest.NewRequest("GET", "https://example.com/?token="+testFake, nil)
	if _, blk, _ := s.Inject(context.Background(), r, Destination{Host: "example.com", TLS: true}); blk == nil || blk.Status != 451 {
		t.Fatal("a fake in another host's URL passed")
	}
	s.ClearCompromise()
	// A body, read one byte at a time so the fake spans many reads.
	body := strings.Repeat("x", 70000) + testFake + "tail"
	r = httptest.NewRequest("POST", "https://example.com/upload", io.NopCloser(iotest.OneByteReader(strings.NewReader(body))))
	if _, blk, _ := s.Inject(context.Background(), r, Destination{Host: "example.com", TLS: true}); blk != nil {
		t.Fatal("refused before the body was read")
	}
	got, err := io.ReadAll(r.Body)
	if err == nil || !strings.Contains(s.Compromised(), "body") {
		t.Fatalf("the body's fake was not caught: %v", err)
	}
	if bytes.Contains(got, []byte(testFake[:10])) {
		t.Fatal("part of the fake was passed on before it was caught")
	}
	// In scope, a body passes whole.
	s.ClearCompromise()
	r = httptest.NewRequest("POST", "https://api.github.com/x", strings.NewReader(body))
	s.Inject(context.Background(), r, Destination{Host: "api.github.com", TLS: true})
	if got, err := io.ReadAll(r.Body); err != nil || string(got) != body {
		t.Fatalf("an in-scope body changed: %v", err)
	}
}

func TestAskBeforeUse(t *testing.T) {
	for _, allow := range []bool{true, false} {
		s := testSwapper(&eventList{}, approver{allow})
		s.creds[0].AskBeforeUse = true
		r := httptest.NewRequest("GET", "https://api.github.com/user", nil)
		r.Header.Set("Authorization", "token "+testFake)
		_, blk, _ := s.Inject(context.Background(), r, Destination{Host: "api.github.com", TLS: true})
		if allow != (blk == nil) {
			t.Fatalf("allow=%v: %+v", allow, blk)
		}
		if !allow && strings.Contains(r.Header.Get("Authorization"), testReal) {
			t.Fatal("the real secret was put in a refused request")
		}
	}
}

// TestReflectedSecretIsScrubbed: a server that echoes the real secret
// back (in a header and in the body, split across reads) sends the VM the
// fake instead.
func TestReflectedSecretIsScrubbed(t *testing.T) {
	s := testSwapper(&eventList{}, nil)
	r := httptest.NewRequest("GET", "https://api.github.com/echo", nil)
	r.Header.Set("Authorization", "token "+testFake)
	scrub, _, _ := s.Inject(context.Background(), r, Destination{Host: "api.github.com", TLS: true})
	if scrub == nil {
		t.Fatal("no scrub for a request that carried a real secret")
	}
	body := strings.Repeat("y", 40000) + "you sent " + testReal + " and " + testReal
	resp := &http.Response{Header: http.Header{"X-Echo": {testReal}}, Body: io.NopCloser(iotest.OneByteReader(strings.NewReader(body)))}
	scrub.Response(resp)
	got, _ := io.ReadAll(resp.Body)
	if bytes.Contains(got, []byte(testReal)) || resp.Header.Get("X-Echo") != testFake {
		t.Fatal("the real secret reached the VM")
	}
	if want := strings.ReplaceAll(body, testReal, testFake); string(got) != want {
		t.Fatal("the body was damaged")
	}
}

// FuzzFakeScanner streams arbitrary bodies, read in arbitrary pieces, with
// or without a fake inside: a fake out of scope is always caught before
// any of it passes, and a body without one passes whole.
func FuzzFakeScanner(f *testing.F) {
	f.Add([]byte("hello"), uint16(3), true, uint8(1))
	f.Add(bytes.Repeat([]byte("a"), 5000), uint16(4000), false, uint8(7))
	f.Fuzz(func(t *testing.T, body []byte, at uint16, withFake bool, chunk uint8) {
		s := testSwapper(discardEvents{}, nil)
		if withFake {
			pos := int(at) % (len(body) + 1)
			body = append(append(append([]byte{}, body[:pos]...), testFake...), body[pos:]...)
		}
		var r io.Reader = bytes.NewReader(body)
		if chunk%2 == 1 {
			r = iotest.OneByteReader(r)
		}
		sc := &fakeScanner{s: s, ctx: context.Background(), host: "example.com", r: io.NopCloser(r)}
		got, err := io.ReadAll(sc)
		has := bytes.Contains(body, []byte(testFake))
		switch {
		case has && err == nil:
			t.Fatal("a fake passed")
		case has && bytes.Contains(got, []byte(testFake[:len(testFake)-1])):
			t.Fatal("most of a fake passed before it was caught")
		case !has && (err != nil || !bytes.Equal(got, body)):
			t.Fatalf("a clean body was changed or stopped: %v", err)
		}
	})
}

// TestUntrackedSecretsAreFlagged: a real-looking secret guard did not
// issue (so the VM holds a real one) is an event, and with block a 451;
// guard's own fakes are not mistaken for one.
func TestUntrackedSecretsAreFlagged(t *testing.T) {
	pemKey := "-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAA\n-----END OPENSSH PRIVATE KEY-----\n"
	for _, tc := range []struct {
		name, header, value, body string
		flagged                   bool
	}{
		{"AWS key in a header", "X-Key", "AKIAIOSFODNN7EXAMPLE", "", true},
		{"GitHub token in basic auth", "Authorization", "Basic " + base64.StdEncoding.EncodeToString([]byte("x:ghp_"+strings.Repeat("Z", 36))), "", true},
		{"private key in a body", "", "", strings.Repeat("a", 70000) + pemKey, true},
		{"our own fake", "Authorization", "token " + testFake, "", false},
		{"a word that starts like a key", "X-Note", "AKIAL is not a key", "", false},
	} {
		for _, block := range []bool{false, true} {
			events := &eventList{}
			s := testSwapper(events, nil)
			s.BlockUntracked = block
			r := httptest.NewRequest("POST", "https://github.com/x", io.NopCloser(iotest.OneByteReader(strings.NewReader(tc.body))))
			if tc.header != "" {
				r.Header.Set(tc.header, tc.value)
			}
			_, blk, _ := s.Inject(context.Background(), r, Destination{Host: "github.com", TLS: true})
			_, err := io.ReadAll(r.Body)
			refused := blk != nil || err != nil
			flagged := strings.Contains(events.types(), audit.TypeCompromise)
			if flagged != tc.flagged || refused != (tc.flagged && block) {
				t.Errorf("%s (block=%v): flagged=%v refused=%v", tc.name, block, flagged, refused)
			}
			if s.Compromised() != "" {
				t.Errorf("%s: an untracked secret marked the workspace compromised", tc.name)
			}
		}
	}
}

// TestDatabasePasswordInABody: a database credential's fake in a request
// body to its host over TLS becomes the real password, with the length
// fixed; elsewhere it is a compromise, and other kinds are never swapped in
// bodies.
func TestDatabasePasswordInABody(t *testing.T) {
	const fake, real = "db" + testTag + "0000000000000000000000000000000000", "short-real-pw"
	s := NewSwapper([]*Credential{{ID: "ch", Service: "clickhouse", Hosts: []string{"ch.test"}, Fake: fake,
		Real: func() (string, error) { return real, nil }}}, []string{testTag}, discardEvents{}, nil)
	body := `{"user":"agent","password":"` + fake + `"}`
	// An oracle: the fake as data the server would return transformed.
	oracle := httptest.NewRequest("POST", "https://ch.test/", strings.NewReader("SELECT base64Encode('"+fake+"')"))
	if _, blk, _ := s.Inject(context.Background(), oracle, Destination{Host: "ch.test", TLS: true}); blk == nil {
		t.Fatal("a fake outside a password field was swapped into a query")
	}
	for _, ok := range []string{"password=" + fake + "&user=a", "postgres://agent:" + fake + "@db/x"} {
		r := httptest.NewRequest("POST", "https://ch.test/login", strings.NewReader(ok))
		if _, blk, _ := s.Inject(context.Background(), r, Destination{Host: "ch.test", TLS: true}); blk != nil {
			t.Fatalf("%s: %s", ok, blk.Reason)
		}
		if got, _ := io.ReadAll(r.Body); !strings.Contains(string(got), real) {
			t.Fatalf("%s: not swapped", ok)
		}
	}
	r := httptest.NewRequest("POST", "https://ch.test/login", strings.NewReader(body))
	scrub, blk, _ := s.Inject(context.Background(), r, Destination{Host: "ch.test", TLS: true})
	got, _ := io.ReadAll(r.Body)
	if blk != nil || string(got) != `{"user":"agent","password":"`+real+`"}` || r.ContentLength != int64(len(got)) || scrub == nil {
		t.Fatalf("in scope: %q %d %+v", got, r.ContentLength, blk)
	}
	r = httptest.NewRequest("POST", "http://ch.test/login", strings.NewReader(body))
	s.Inject(context.Background(), r, Destination{Host: "ch.test", TLS: false})
	if got, _ := io.ReadAll(r.Body); string(got) != body {
		t.Fatal("swapped over plain HTTP")
	}
	r = httptest.NewRequest("POST", "https://other.test/", strings.NewReader(body))
	s.Inject(context.Background(), r, Destination{Host: "other.test", TLS: true})
	if _, err := io.ReadAll(r.Body); err == nil || s.Compromised() == "" {
		t.Fatal("a database fake in a body to another host passed")
	}
}

// TestCompressedReflectionIsScrubbed: a request that carried a real secret
// asks for an uncompressed answer, and a compressed one is decompressed to
// be scrubbed (or withheld when guard cannot read it).
func TestCompressedReflectionIsScrubbed(t *testing.T) {
	s := testSwapper(&eventList{}, nil)
	r := httptest.NewRequest("GET", "https://api.github.com/echo", nil)
	r.Header.Set("Authorization", "token "+testFake)
	r.Header.Set("Accept-Encoding", "gzip, br")
	scrub, _, _ := s.Inject(context.Background(), r, Destination{Host: "api.github.com", TLS: true})
	if r.Header.Get("Accept-Encoding") != "" {
		t.Fatal("the request still asks for a compressed answer")
	}
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	zw.Write([]byte("reflected: " + testReal))
	zw.Close()
	resp := &http.Response{Header: http.Header{"Content-Encoding": {"gzip"}}, Body: io.NopCloser(&gz)}
	scrub.Response(resp)
	got, _ := io.ReadAll(resp.Body)
	if string(got) != "reflected: "+testFake || resp.Header.Get("Content-Encoding") != "" {
		t.Fatalf("gzip reflection: %q", got)
	}
	resp = &http.Response{Header: http.Header{"Content-Encoding": {"br"}}, Body: io.NopCloser(strings.NewReader("opaque " + testReal))}
	scrub.Response(resp)
	if got, _ := io.ReadAll(resp.Body); bytes.Contains(got, []byte(testReal)) {
		t.Fatal("an unreadable encoding passed the real secret")
	}
}

// TestNoRealSecretThroughOtherDoors: an AWS fake secret on the wire is a
// compromise even to its own hosts; a client certificate never becomes a
// header; a Basic prefix does not hide a fake; a percent-encoded fake
// counts.
func TestNoRealSecretThroughOtherDoors(t *testing.T) {
	awsCred := &Credential{ID: "aws", Service: "aws", Hosts: []string{"amazonaws.com"}, Fake: testTag + "fakeSecretFakeSecretFakeSecret00",
		FakeKeyID: "AKIA" + testTag + "00000000", Real: func() (string, error) { return "realSecret", nil }, RealKeyID: func() string { return "AKIAREAL" }}
	certCred := &Credential{ID: "kube", Service: "kubernetes", Hosts: []string{"kube.test"}, Fake: "kk" + testTag + "000000000000000000000000000000",
		Real: func() (string, error) { return "-----BEGIN CERTIFICATE-----", nil }, ClientCert: func() (*tls.Certificate, error) { return &tls.Certificate{}, nil }}
	for _, tc := range []struct {
		name, host, header, value, url string
	}{
		{"aws secret as a bearer to an AWS host", "abc.execute-api.us-east-1.amazonaws.com", "Authorization", "Bearer " + awsCred.Fake, ""},
		{"basic prefix on another host", "example.com", "X-Exfil", "Basic " + testTag + strings.Repeat("A", 32), ""},
		{"percent-encoded fake in a URL", "example.com", "", "", "/?q=%67hp_" + testFake[4:]},
	} {
		s := NewSwapper([]*Credential{awsCred, certCred, {ID: "gh", Hosts: []string{"github.com"}, Fake: testFake,
			Real: func() (string, error) { return testReal, nil }},
			{ID: "gen", Hosts: []string{"api.test"}, Fake: testTag + strings.Repeat("A", 32), Real: func() (string, error) { return "r", nil }}},
			[]string{testTag}, discardEvents{}, nil)
		r := httptest.NewRequest("GET", "https://"+tc.host+"/x"+tc.url, nil)
		if tc.header != "" {
			r.Header.Set(tc.header, tc.value)
		}
		_, blk, _ := s.Inject(context.Background(), r, Destination{Host: tc.host, TLS: true})
		if blk == nil || blk.Status != 451 {
			t.Errorf("%s: not refused (%+v)", tc.name, blk)
		}
		for _, v := range r.Header {
			if strings.Contains(strings.Join(v, ""), "realSecret") {
				t.Errorf("%s: the real secret was put in a header", tc.name)
			}
		}
	}
	// A certificate credential's fake in its custom header, or beside
	// another fake in Authorization: never a PEM in a header, no panic.
	certCred.Headers = []string{"X-Token"}
	s := NewSwapper([]*Credential{certCred, {ID: "gh2", Hosts: []string{"kube.test"}, Fake: testFake,
		Real: func() (string, error) { return testReal, nil }}}, []string{testTag}, discardEvents{}, nil)
	r := httptest.NewRequest("GET", "https://kube.test/api", nil)
	r.Header.Set("Authorization", "Bearer "+certCred.Fake+" "+testFake)
	r.Header.Set("X-Token", certCred.Fake)
	s.Inject(context.Background(), r, Destination{Host: "kube.test", TLS: true})
	if strings.Contains(r.Header.Get("X-Token"), "BEGIN") || r.Header.Get("Authorization") != "" {
		t.Fatalf("headers after a certificate credential: %v", r.Header)
	}
}

// TestInterimAndUpgradeResponsesAfterASwap: a 103 that echoes the real
// token reaches the client scrubbed, and a WebSocket upgrade still works
// after the token was swapped in.
func TestInterimAndUpgradeResponsesAfterASwap(t *testing.T) {
	w := newWorld(t)
	up := startUpstream(t, w.pki, "127.0.0.10", "echo.example.test", http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Upgrade") != "" {
			rw.Header().Set("Connection", "Upgrade")
			rw.Header().Set("Upgrade", "websocket")
			rw.Header().Set("X-Echo", r.Header.Get("Authorization"))
			rw.WriteHeader(http.StatusSwitchingProtocols)
			return
		}
		rw.Header().Set("Link", "</x>; rel=preload; token="+r.Header.Get("Authorization"))
		rw.WriteHeader(http.StatusEarlyHints)
		io.WriteString(rw, "final "+r.Header.Get("Authorization"))
	}))
	w.hosts["echo.example.test"] = "127.0.0.10"
	sw := NewSwapper([]*Credential{{ID: "e", Hosts: []string{"echo.example.test"}, Fake: testFake,
		Real: func() (string, error) { return testReal, nil }}}, []string{testTag}, discardEvents{}, nil)
	r := startRig(t, rigOptions{rules: "allow web echo.example.test\ndefault deny\n", hosts: w.hosts, upstreamCAs: w.pki.Pool, credentials: sw})
	out, err := curl(t, "-i", "--proxy", "http://"+r.explicit, "--cacert", r.caFile, "-H", "Authorization: token "+testFake, url(up, "/"))
	if err != nil || strings.Contains(out, testReal) || !strings.Contains(out, "103") || !strings.Contains(out, "final token "+testFake) {
		t.Fatalf("103 and the final answer: %v\n%s", err, out)
	}
	out, _ = curl(t, "-i", "--max-time", "3", "--proxy", "http://"+r.explicit, "--cacert", r.caFile, "-H", "Authorization: token "+testFake,
		"-H", "Connection: Upgrade", "-H", "Upgrade: websocket", "-H", "Sec-WebSocket-Version: 13", "-H", "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==",
		"--http1.1", url(up, "/ws"))
	if !strings.Contains(out, "101") || strings.Contains(out, testReal) {
		t.Fatalf("upgrade after a swap:\n%s", out)
	}
}

// TestFakeInACompressedBody: gzip does not hide a fake headed elsewhere.
func TestFakeInACompressedBody(t *testing.T) {
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	zw.Write([]byte(strings.Repeat("padding ", 20000) + "token=" + testFake))
	zw.Close()
	s := testSwapper(discardEvents{}, nil)
	r := httptest.NewRequest("POST", "https://example.com/upload", io.NopCloser(iotest.OneByteReader(bytes.NewReader(gz.Bytes()))))
	r.Header.Set("Content-Encoding", "gzip")
	if _, blk, _ := s.Inject(context.Background(), r, Destination{Host: "example.com", TLS: true}); blk != nil {
		t.Fatal("refused before the body was read")
	}
	if _, err := io.ReadAll(r.Body); err == nil || !strings.Contains(s.Compromised(), "compressed body") {
		t.Fatalf("a gzip-hidden fake passed: %v %q", err, s.Compromised())
	}
	// A clean compressed body passes whole.
	s.ClearCompromise()
	var clean bytes.Buffer
	zw = gzip.NewWriter(&clean)
	zw.Write([]byte("nothing to see"))
	zw.Close()
	r = httptest.NewRequest("POST", "https://example.com/upload", bytes.NewReader(clean.Bytes()))
	r.Header.Set("Content-Encoding", "gzip")
	s.Inject(context.Background(), r, Destination{Host: "example.com", TLS: true})
	if got, err := io.ReadAll(r.Body); err != nil || !bytes.Equal(got, clean.Bytes()) {
		t.Fatalf("a clean gzip body: %v", err)
	}
}

// failingEvents is an event log that cannot be written.
type failingEvents struct{}

func (failingEvents) Emit(context.Context, audit.Event) error { return io.ErrShortWrite }

// TestUnrecordedUseIsRefused: a credential use the timeline cannot record
// does not happen.
func TestUnrecordedUseIsRefused(t *testing.T) {
	s := testSwapper(failingEvents{}, nil)
	r := httptest.NewRequest("GET", "https://api.github.com/user", nil)
	r.Header.Set("Authorization", "token "+testFake)
	if _, blk, _ := s.Inject(context.Background(), r, Destination{Host: "api.github.com", TLS: true}); blk == nil || !strings.Contains(blk.Reason, "event log") {
		t.Fatalf("an unrecorded use went ahead: %+v", blk)
	}
}
