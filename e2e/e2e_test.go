package e2e

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"guard/audit"
	"guard/internal/testpki"
)

// bin holds the guardd and guardctl binaries built for this run.
var bin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "guard-e2e-bin")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	build := exec.Command("go", "build", "-race", "-o", dir, "guard/cmd/guardd", "guard/cmd/guardctl")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "build:", err)
		os.Exit(1)
	}
	bin = dir
	// Race-enabled binaries otherwise sleep a second at exit.
	os.Setenv("GORACE", "atexit_sleep_ms=0")
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// guardd is a running daemon process.
type guardd struct {
	cmd     *exec.Cmd
	stderr  *lockedBuffer
	state   string
	control string
	done    chan struct{} // closed when the process has exited
	err     error         // its exit error, once done is closed
}

// stop sends SIGTERM and waits for the exit, returning its error.
func (g *guardd) stop(t *testing.T) error {
	t.Helper()
	g.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-g.done:
		return g.err
	case <-time.After(10 * time.Second):
		g.cmd.Process.Kill()
		t.Fatal("guardd did not stop on SIGTERM")
		return nil
	}
}

func shortDir(t *testing.T) string {
	d, err := os.MkdirTemp("", "ge")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(d) })
	return d
}

func startGuardd(t *testing.T, args ...string) *guardd {
	t.Helper()
	g := &guardd{state: filepath.Join(shortDir(t), "state"), stderr: &lockedBuffer{}, done: make(chan struct{})}
	g.control = filepath.Join(g.state, "control.sock")
	g.cmd = exec.Command(filepath.Join(bin, "guardd"), append(args, "--state-dir", g.state)...)
	g.cmd.Stderr = g.stderr
	if err := g.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { g.err = g.cmd.Wait(); close(g.done) }()
	t.Cleanup(func() {
		select {
		case <-g.done:
			return // the test stopped it and checked
		default:
		}
		// A data race in guardd makes it exit non-zero.
		if err := g.stop(t); err != nil {
			t.Errorf("guardd exit: %v\n%s", err, g.stderr)
		}
	})
	deadline := time.Now().Add(20 * time.Second)
	for {
		if _, code := g.ctl(t, "status"); code == 0 {
			return g
		}
		select {
		case <-g.done:
			t.Fatalf("guardd exited: %v\n%s", g.err, g.stderr)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("guardd did not come up:\n%s", g.stderr)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// ctl runs guardctl against this daemon and returns stdout+stderr and the
// exit status.
func (g *guardd) ctl(t *testing.T, args ...string) (string, int) {
	t.Helper()
	return guardctl(t, append([]string{"--control", g.control}, args...)...)
}

func guardctl(t *testing.T, args ...string) (string, int) {
	t.Helper()
	cmd := exec.Command(filepath.Join(bin, "guardctl"), args...)
	cmd.Env = append(os.Environ(), "GUARD_CONTROL=")
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	switch {
	case err == nil:
		return string(out), 0
	case errors.As(err, &ee):
		return string(out), ee.ExitCode()
	}
	t.Fatalf("guardctl %v: %v", args, err)
	return "", -1
}

func writeFile(t *testing.T, dir, name, text string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestRulesCheckAgainstDemo runs guardctl rules check against guardd on the
// demo profile, whose rules are DESIGN.md's example.
func TestRulesCheckAgainstDemo(t *testing.T) {
	g := startGuardd(t, "--profile", "../testdata/demo/profile.json")
	tests := []struct {
		args []string
		want string
	}{
		{[]string{"--proto", "tcp", "--host", "api.github.com", "--port", "443"}, "allow line 1: allow tcp api.github.com:443"},
		{[]string{"--proto", "tcp", "--host", "API.GitHub.com.", "--port", "443"}, "allow line 1: allow tcp api.github.com:443"},
		{[]string{"--proto", "tcp", "--host", "api.github.com.evil", "--port", "443"}, "deny default deny"},
		{[]string{"--proto", "tcp", "--host", "api.github.com", "--port", "22"}, "deny default deny"},
		{[]string{"--proto", "tcp", "--host", "api.example.com", "--port", "443"}, "intercept line 2: allow web api.example.com GET,POST"},
		{[]string{"--proto", "tcp", "--host", "api.example.com", "--port", "443", "--method", "post"}, "allow line 2: allow web api.example.com GET,POST"},
		{[]string{"--proto", "tcp", "--host", "api.example.com", "--port", "443", "--method", "DELETE"}, "deny line 2: allow web api.example.com GET,POST"},
		{[]string{"--proto", "tcp", "--host", "api.internal", "--port", "443", "--method", "GET"}, "allow line 3: deny web api.internal DELETE,PUT"},
		{[]string{"--proto", "tcp", "--host", "api.internal", "--port", "443", "--method", "PUT"}, "deny line 3: deny web api.internal DELETE,PUT"},
		{[]string{"--proto", "udp", "--ip", "1.1.1.1", "--port", "53"}, "deny line 4: deny udp any:53"},
		{[]string{"--proto", "tcp", "--ip", "::ffff:10.0.0.1", "--port", "22"}, "deny line 5: deny any 10.0.0.0/8"},
		{[]string{"--proto", "tcp", "--ip", "127.0.0.1", "--port", "11434"}, "allow localInference: allow tcp 127.0.0.1:11434"},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			out, code := g.ctl(t, append([]string{"rules", "check"}, tt.args...)...)
			if code != 0 || strings.TrimSpace(out) != tt.want {
				t.Fatalf("exit %d: %q, want %q", code, out, tt.want)
			}
			// Offline on the same rules gives the same verdict, less the
			// profile's exemption.
			if strings.Contains(tt.want, "localInference") {
				return
			}
			out, code = guardctl(t, append([]string{"rules", "check", "--rules", "../rules/testdata/good/design-example.rules"}, tt.args...)...)
			if code != 0 || strings.TrimSpace(out) != tt.want {
				t.Fatalf("offline: exit %d: %q, want %q", code, out, tt.want)
			}
		})
	}
	out, _ := g.ctl(t, "rules", "check", "--proto", "tcp", "--host", "api.internal", "--port", "443", "--json")
	var res struct {
		Verdict string
		Rule    struct{ Line int }
	}
	if err := json.Unmarshal([]byte(out), &res); err != nil || res.Verdict != "intercept" || res.Rule.Line != 3 {
		t.Fatalf("json: %q %v", out, err)
	}
}

// TestRulesApplyHotSwap: a good file changes verdicts at once; a bad one is
// refused with its line errors and changes nothing.
func TestRulesApplyHotSwap(t *testing.T) {
	g := startGuardd(t, "--demo")
	dir := shortDir(t)
	probe := []string{"rules", "check", "--proto", "tcp", "--host", "example.org", "--port", "443"}
	if out, _ := g.ctl(t, probe...); !strings.HasPrefix(out, "deny default deny") {
		t.Fatalf("before: %s", out)
	}
	bad := writeFile(t, dir, "bad.rules", "allow tcp example.org:443\nallow tcp example.org:0\ndefault maybe\nallow any 10.0.0.0/40\n")
	out, code := g.ctl(t, "rules", "apply", bad)
	if code != 1 || !strings.Contains(out, "Line 2: port \"0\" out of range") || !strings.Contains(out, "Line 3: unknown default \"maybe\"") ||
		!strings.Contains(out, "Line 4: prefix length 40") {
		t.Fatalf("bad apply: exit %d\n%s", code, out)
	}
	if out, _ := g.ctl(t, probe...); !strings.HasPrefix(out, "deny default deny") {
		t.Fatalf("a bad file changed the verdict: %s", out)
	}
	huge := writeFile(t, dir, "huge.rules", "allow tcp "+strings.Repeat("x", 10<<20)+"\n")
	if out, code := g.ctl(t, "rules", "apply", huge); code != 1 || !strings.Contains(out, "Line 1: line is") {
		t.Fatalf("10 MB line: exit %d %.200s", code, out)
	}
	garbage := writeFile(t, dir, "garbage.rules", "\x00\x01\xff\xfe garbage\n")
	if out, code := g.ctl(t, "rules", "apply", garbage); code != 1 || !strings.Contains(out, "Line 1:") {
		t.Fatalf("garbage: exit %d %s", code, out)
	}
	if out, code := g.ctl(t, "rules", "apply", filepath.Join(dir, "missing.rules")); code != 1 || !strings.Contains(out, "no such file") {
		t.Fatalf("missing file: exit %d %s", code, out)
	}

	good := writeFile(t, dir, "good.rules", "allow tcp example.org:443\nallow tcp api.github.com:443\ndefault deny\n")
	out, code = g.ctl(t, "rules", "apply", good)
	if code != 0 || !strings.Contains(out, "applied "+good+": 2 rules, default deny") || !strings.Contains(out, "+ allow tcp example.org:443") ||
		!strings.Contains(out, "- deny udp any:53") {
		t.Fatalf("good apply: exit %d\n%s", code, out)
	}
	if out, _ := g.ctl(t, probe...); !strings.HasPrefix(out, "allow line 1: allow tcp example.org:443") {
		t.Fatalf("after: %s", out)
	}
	out, _ = g.ctl(t, "rules", "show")
	if !strings.HasSuffix(out, "allow tcp example.org:443\nallow tcp api.github.com:443\ndefault deny\n") ||
		!strings.Contains(out, "# always first (localInference): allow tcp 127.0.0.1:11434") {
		t.Fatalf("show:\n%s", out)
	}
	// rules show is itself a rules file.
	shown := writeFile(t, dir, "shown.rules", out)
	if out, code := g.ctl(t, "rules", "apply", shown); code != 0 || !strings.Contains(out, "no change") {
		t.Fatalf("re-applying show output: exit %d\n%s", code, out)
	}
	out, _ = g.ctl(t, "events")
	if strings.Count(out, "policy.change") != 3 || !strings.Contains(out, "guardctl rules apply: 2 rules, default deny (+1 -4)") {
		t.Fatalf("events:\n%s", out)
	}
}

func TestSIGHUPReloadsProfileRules(t *testing.T) {
	dir := shortDir(t)
	rulesPath := writeFile(t, dir, "rules.pf", "default deny\n")
	prof := writeFile(t, dir, "profile.json", `{"name":"hup","egress":{"rulesFile":"rules.pf"}}`)
	g := startGuardd(t, "--profile", prof)
	probe := []string{"rules", "check", "--proto", "udp", "--ip", "192.0.2.1", "--port", "53"}
	writeFile(t, dir, "rules.pf", "allow udp 192.0.2.1:53\ndefault deny\n")
	g.cmd.Process.Signal(syscall.SIGHUP)
	waitFor(t, g, func() bool { out, _ := g.ctl(t, probe...); return strings.HasPrefix(out, "allow line 1") })
	// A bad file on SIGHUP changes nothing.
	os.WriteFile(rulesPath, []byte("allow udp 192.0.2.1:53\nallow tcp bogus:0\n"), 0o600)
	g.cmd.Process.Signal(syscall.SIGHUP)
	waitFor(t, g, func() bool { return strings.Contains(g.stderr.String(), "reload refused") })
	if out, _ := g.ctl(t, probe...); !strings.HasPrefix(out, "allow line 1") {
		t.Fatalf("bad reload changed policy: %s", out)
	}
}

func waitFor(t *testing.T, g *guardd, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if cond() {
			return
		}
	}
	t.Fatalf("condition not met in 10 s; guardd said:\n%s", g.stderr.String())
}

// lockedBuffer collects a process's stderr while the test reads it.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

func TestGracefulStop(t *testing.T) {
	g := startGuardd(t, "--demo")
	st, err := os.Stat(g.state)
	if err != nil || st.Mode().Perm() != 0o700 {
		t.Fatalf("state dir mode %v", st.Mode().Perm())
	}
	if st, err := os.Stat(g.control); err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("socket mode: %v", err)
	}
	if err := g.stop(t); err != nil {
		t.Fatalf("exit: %v\n%s", err, g.stderr)
	}
	if _, err := os.Stat(g.control); !errors.Is(err, os.ErrNotExist) {
		t.Fatal("control socket left behind")
	}
	out, code := g.ctl(t, "status")
	if code != 1 || !strings.Contains(out, "cannot reach guardd at "+g.control) {
		t.Fatalf("unreachable socket: exit %d %s", code, out)
	}
	b, _ := os.ReadFile(filepath.Join(g.state, "events.jsonl"))
	if !bytes.Contains(b, []byte(`"type":"policy.change","source":"start"`)) {
		t.Fatalf("event log: %s", b)
	}
}

func TestBadProfileRefusesToStart(t *testing.T) {
	dir := shortDir(t)
	cases := map[string]struct{ profile, want string }{
		"unknown field": {`{"name":"w","egress":{"rulez":"x"}}`, "egress.rulez: unknown field"},
		"wrong type":    {`{"name":"w","consent":{"timeoutSeconds":"sixty"}}`, "consent.timeoutSeconds: want a whole number, got a string"},
		"bad rules":     {`{"name":"w","egress":{"rules":"allow tcp x:0"}}`, "egress.rules: Line 1: port \"0\" out of range"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			p := writeFile(t, dir, strings.ReplaceAll(name, " ", "-")+".json", tc.profile)
			cmd := exec.Command(filepath.Join(bin, "guardd"), "--profile", p, "--state-dir", filepath.Join(dir, "s"))
			out, err := cmd.CombinedOutput()
			var ee *exec.ExitError
			if !errors.As(err, &ee) || ee.ExitCode() != 1 || !strings.Contains(string(out), tc.want) {
				t.Fatalf("%v: %s", err, out)
			}
		})
	}
	cmd := exec.Command(filepath.Join(bin, "guardd"), "--profile", filepath.Join(dir, "nope.json"))
	if out, err := cmd.CombinedOutput(); err == nil || !strings.Contains(string(out), "no such file") {
		t.Fatalf("missing profile: %v %s", err, out)
	}
	cmd = exec.Command(filepath.Join(bin, "guardd"), "--bogus")
	if err := cmd.Run(); err == nil || err.(*exec.ExitError).ExitCode() != 2 {
		t.Fatalf("usage error: %v", err)
	}
}

func TestEventsFollow(t *testing.T) {
	g := startGuardd(t, "--demo")
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(bin, "guardctl"), "--control", g.control, "events", "--follow", "--json")
	stdout, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { cancel(); cmd.Wait() }()
	sc := bufio.NewScanner(stdout)
	next := func() audit.Event {
		if !sc.Scan() {
			t.Fatalf("stream ended: %v", sc.Err())
		}
		var e audit.Event
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			t.Fatal(err)
		}
		return e
	}
	if e := next(); e.Source != "start" {
		t.Fatalf("backlog: %+v", e)
	}
	good := writeFile(t, shortDir(t), "r.rules", "default allow\n")
	if out, code := g.ctl(t, "rules", "apply", good); code != 0 {
		t.Fatal(out)
	}
	if e := next(); e.Type != audit.TypePolicyChange || e.Default != "allow" || e.Workspace != "demo" {
		t.Fatalf("live: %+v", e)
	}
}

func TestProfileInitThenRun(t *testing.T) {
	dir := shortDir(t)
	out, code := guardctl(t, "profile", "init", "fresh", "--dir", filepath.Join(dir, "fresh"))
	if code != 0 {
		t.Fatal(out)
	}
	g := startGuardd(t, "--profile", filepath.Join(dir, "fresh", "profile.json"))
	out, _ = g.ctl(t, "status")
	if !regexp.MustCompile(`(?m)^workspace +fresh$`).MatchString(out) || !strings.Contains(out, "default deny") {
		t.Fatalf("status:\n%s", out)
	}
	if out, code := guardctl(t, "profile", "init", "fresh", "--dir", filepath.Join(dir, "fresh")); code != 1 || !strings.Contains(out, "already exists") {
		t.Fatalf("overwrite: %d %s", code, out)
	}
}

func TestCompletionAndHelp(t *testing.T) {
	if out, code := guardctl(t, "completion", "bash"); code != 0 || !strings.Contains(out, "__start_guardctl") {
		t.Fatalf("completion: %d", code)
	}
	out, err := exec.Command(filepath.Join(bin, "guardd"), "--help").Output()
	if err != nil {
		t.Fatal(err)
	}
	for _, flag := range []string{"--profile", "--demo", "--state-dir", "--control", "--proxy-listen", "--log-level"} {
		if !strings.Contains(string(out), flag) {
			t.Errorf("guardd --help does not document %s", flag)
		}
	}
	if _, code := guardctl(t, "rules", "check", "--proto", "icmp", "--ip", "1.1.1.1", "--port", "1"); code != 2 {
		t.Errorf("bad --proto: exit %d, want 2", code)
	}
	if _, code := guardctl(t, "rules", "apply"); code != 2 {
		t.Errorf("missing FILE: exit %d, want 2", code)
	}
}

// serveHTTPS runs h over TLS on ip (a free port) with tlsConfig (see
// serverTLS) until the test ends, and returns the port.
func serveHTTPS(t *testing.T, ip string, h http.Handler, tlsConfig *tls.Config) int {
	t.Helper()
	ln, err := net.Listen("tcp", ip+":0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: h, TLSConfig: tlsConfig}
	go srv.ServeTLS(ln, "", "")
	t.Cleanup(func() { srv.Close() })
	return ln.Addr().(*net.TCPAddr).Port
}

// serverTLS is a TLS config with a certificate from pki for names.
func serverTLS(t *testing.T, pki *testpki.CA, names ...string) *tls.Config {
	return &tls.Config{Certificates: []tls.Certificate{pki.ServerCert(t, names...)}}
}
