package daemon

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"guard"
	"guard/audit"
	"guard/control"
	"guard/firewall"
	"guard/rules"
	"guard/workspace"
)

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// shortTempDir keeps unix socket paths under the 108-byte limit.
func shortTempDir(t *testing.T) string {
	dir, err := os.MkdirTemp("", "gd")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

func demoLoader() (*workspace.Profile, error) {
	return workspace.Parse(guard.DemoProfile(), "embedded demo", "")
}

// startDaemon runs a daemon on the demo profile and returns it with a
// client; the daemon stops at the end of the test.
func startDaemon(t *testing.T, cfg Config) (*Daemon, *control.Client) {
	t.Helper()
	if cfg.LoadProfile == nil {
		cfg.LoadProfile = demoLoader
	}
	if cfg.StateDir == "" {
		cfg.StateDir = filepath.Join(shortTempDir(t), "state")
	}
	cfg.Logger = quiet()
	d, err := New(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	c := control.NewClient(d.controlPath)
	deadline := time.Now().Add(5 * time.Second)
	for {
		if _, err := c.Status(context.Background()); err == nil {
			return d, c
		} else if time.Now().After(deadline) {
			t.Fatalf("control socket never answered: %v", err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestStateDirAndSocketModes(t *testing.T) {
	d, _ := startDaemon(t, Config{})
	st, err := os.Stat(d.stateDir)
	if err != nil || st.Mode().Perm() != 0o700 {
		t.Fatalf("state dir: %v %v", st.Mode().Perm(), err)
	}
	st, err = os.Stat(d.controlPath)
	if err != nil || st.Mode().Perm() != 0o600 || st.Mode()&os.ModeSocket == 0 {
		t.Fatalf("control socket: %v %v", st.Mode(), err)
	}
	st, err = os.Stat(d.eventPath)
	if err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("event log: %v", err)
	}
}

func TestSecondDaemonOnSameStateDirIsRefused(t *testing.T) {
	d, _ := startDaemon(t, Config{})
	_, err := New(context.Background(), Config{LoadProfile: demoLoader, StateDir: d.stateDir, Logger: quiet()})
	if err == nil || !strings.Contains(err.Error(), "another guardd") {
		t.Fatalf("got %v", err)
	}
}

func check(t *testing.T, c *control.Client, req control.CheckRequest) string {
	t.Helper()
	r, err := c.Check(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	return r.Verdict + " " + r.Rule.String()
}

func TestApplyChangesVerdictsOnlyWhenValid(t *testing.T) {
	_, c := startDaemon(t, Config{})
	ctx := context.Background()
	gh := control.CheckRequest{Proto: "tcp", Hosts: []string{"api.github.com"}, Port: 443}
	ex := control.CheckRequest{Proto: "tcp", Hosts: []string{"example.org"}, Port: 443}
	if got := check(t, c, gh); got != "allow line 1: allow tcp api.github.com:443" {
		t.Fatalf("demo verdict: %s", got)
	}
	if got := check(t, c, control.CheckRequest{Proto: "tcp", IP: "127.0.0.1", Port: 11434}); got != "allow localInference: allow tcp 127.0.0.1:11434" {
		t.Fatalf("local inference: %s", got)
	}

	_, err := c.ApplyRules(ctx, []byte("allow tcp example.org\ndefault maybe\nalow x\n"), "bad.rules")
	var rej *control.RejectedError
	if !errors.As(err, &rej) || len(rej.Body.Lines) != 2 || !strings.HasPrefix(rej.Body.Lines[0], "Line 2: unknown default") {
		t.Fatalf("bad file: %v", err)
	}
	if got := check(t, c, ex); got != "deny default deny" {
		t.Fatalf("a rejected file changed the policy: %s", got)
	}

	res, err := c.ApplyRules(ctx, []byte("allow tcp example.org\nallow tcp api.github.com:443\ndefault allow\n"), "good.rules")
	if err != nil {
		t.Fatal(err)
	}
	if res.Rules != 2 || res.Default != "allow" || res.DefaultBefore != "deny" || len(res.Added) != 1 || len(res.Removed) != 4 {
		t.Fatalf("summary: %+v", res)
	}
	if got := check(t, c, ex); got != "allow line 1: allow tcp example.org" {
		t.Fatalf("after apply: %s", got)
	}
	if got := check(t, c, gh); got != "allow line 2: allow tcp api.github.com:443" {
		t.Fatalf("after apply: %s", got)
	}
	view, _ := c.Rules(ctx)
	if view.Text != "allow tcp example.org\nallow tcp api.github.com:443\ndefault allow\n" || view.Source != "good.rules" {
		t.Fatalf("rules show: %+v", view)
	}
	if len(view.Exemptions) != 2 || view.Exemptions[0] != "first (localInference): allow tcp 127.0.0.1:11434" || view.Exemptions[1] != "last (quic): deny udp any:443" {
		t.Fatalf("exemptions: %v", view.Exemptions)
	}
	res, _ = c.ApplyRules(ctx, []byte("allow tcp api.github.com:443\nallow tcp example.org\ndefault allow\n"), "x")
	if !res.Reordered || res.Unchanged() {
		t.Fatalf("reorder not noticed: %+v", res)
	}
	evs, _ := c.Events(ctx)
	var changes []string
	for _, e := range evs {
		if e.Type == audit.TypePolicyChange {
			changes = append(changes, e.Source)
		}
	}
	if strings.Join(changes, ",") != "start,guardctl rules apply,guardctl rules apply" {
		t.Fatalf("policy events: %v", changes)
	}
}

// TestConcurrentDecisionsDuringSwap: decisions racing with applies always
// see one whole policy, never a mix.
func TestConcurrentDecisionsDuringSwap(t *testing.T) {
	d, _ := startDaemon(t, Config{})
	a := []byte("allow tcp x.test\ndefault deny\n")
	b := []byte("deny tcp x.test\ndefault allow\n")
	var wg sync.WaitGroup
	stop := make(chan struct{})
	for range 4 {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				v := d.Check(firewall.Flow{Proto: firewall.TCP, Names: []string{"x.test"}, Port: 1})
				w := d.Check(firewall.Flow{Proto: firewall.TCP, Names: []string{"y.test"}, Port: 1})
				_, _ = v, w
			}
		})
	}
	for i := range 200 {
		src := a
		if i%2 == 1 {
			src = b
		}
		if _, err := d.ApplyRules(context.Background(), src, "t"); err != nil {
			t.Fatal(err)
		}
		m := d.Active().Load()
		x := m.Verdict(firewall.Flow{Proto: firewall.TCP, Names: []string{"x.test"}, Port: 1})
		y := m.Verdict(firewall.Flow{Proto: firewall.TCP, Names: []string{"y.test"}, Port: 1})
		if x.Action == y.Action {
			t.Fatalf("mixed policy: x %v y %v", x.Action, y.Action)
		}
	}
	close(stop)
	wg.Wait()
}

func TestDecideFlowRecordsOneEvent(t *testing.T) {
	d, c := startDaemon(t, Config{})
	ctx := context.Background()
	v := d.DecideFlow(ctx, firewall.Flow{Proto: firewall.TCP, IP: netip.MustParseAddr("::ffff:10.9.8.7"), Port: 22}, audit.LayerL4)
	if v.Action != firewall.Deny || v.Rule.Line != 5 {
		t.Fatalf("verdict %+v", v)
	}
	evs, err := c.Events(ctx)
	if err != nil {
		t.Fatal(err)
	}
	last := evs[len(evs)-1]
	if last.Type != audit.TypeFirewall || last.Action != "deny" || last.Layer != "l4" || last.IP != "10.9.8.7" ||
		last.Port != 22 || last.Rule == nil || last.Rule.Text != "deny any 10.0.0.0/8" || last.Workspace != "demo" {
		t.Fatalf("event %+v", last)
	}
}

// flakySink fails on demand.
type flakySink struct {
	mu   sync.Mutex
	fail bool
}

func (s *flakySink) Write([]byte) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.fail {
		return errors.New("no space left on device")
	}
	return nil
}
func (s *flakySink) Close() error { return nil }
func (s *flakySink) set(f bool)   { s.mu.Lock(); s.fail = f; s.mu.Unlock() }

// TestUnwritableEventLogDenies: the decision becomes deny, and a policy
// change that cannot be recorded is not made.
func TestUnwritableEventLogDenies(t *testing.T) {
	sink := &flakySink{}
	d, c := startDaemon(t, Config{EventSink: sink})
	ctx := context.Background()
	allowed := firewall.Flow{Proto: firewall.TCP, Names: []string{"api.github.com"}, Port: 443}
	if v := d.DecideFlow(ctx, allowed, audit.LayerL4); v.Action != firewall.Allow {
		t.Fatalf("healthy log: %v", v.Action)
	}
	sink.set(true)
	if v := d.DecideFlow(ctx, allowed, audit.LayerL4); v.Action != firewall.Deny || v.Rule.Origin != "failClosed" {
		t.Fatalf("unwritable log must deny, got %+v", v)
	}
	if _, err := c.ApplyRules(ctx, []byte("default allow\n"), "x"); err == nil {
		t.Fatal("a policy change that could not be recorded was made")
	}
	if got := check(t, c, control.CheckRequest{Proto: "tcp", Hosts: []string{"example.org"}, Port: 1}); got != "deny default deny" {
		t.Fatalf("policy changed anyway: %s", got)
	}
	sink.set(false)
	if v := d.DecideFlow(ctx, allowed, audit.LayerL4); v.Action != firewall.Allow {
		t.Fatalf("recovered log: %v", v.Action)
	}
}

func TestStartRefusedWhenEventLogUnwritable(t *testing.T) {
	sink := &flakySink{fail: true}
	_, err := New(context.Background(), Config{LoadProfile: demoLoader, StateDir: filepath.Join(shortTempDir(t), "s"), EventSink: sink, Logger: quiet()})
	if err == nil || !strings.Contains(err.Error(), "refusing to start") {
		t.Fatalf("got %v", err)
	}
}

func TestReload(t *testing.T) {
	dir := shortTempDir(t)
	profPath := filepath.Join(dir, "profile.json")
	rulesPath := filepath.Join(dir, "rules.pf")
	os.WriteFile(profPath, []byte(`{"name":"w","egress":{"rulesFile":"rules.pf"}}`), 0o600)
	os.WriteFile(rulesPath, []byte("default deny\n"), 0o600)
	d, c := startDaemon(t, Config{LoadProfile: func() (*workspace.Profile, error) { return workspace.LoadFile(profPath) }})
	req := control.CheckRequest{Proto: "udp", IP: "192.0.2.1", Port: 53}
	if got := check(t, c, req); got != "deny default deny" {
		t.Fatal(got)
	}
	os.WriteFile(rulesPath, []byte("allow udp 192.0.2.1:53\ndefault deny\n"), 0o600)
	if err := d.Reload(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := check(t, c, req); got != "allow line 1: allow udp 192.0.2.1:53" {
		t.Fatal(got)
	}
	os.WriteFile(rulesPath, []byte("allow udp 192.0.2.1:0\n"), 0o600)
	if err := d.Reload(context.Background()); err == nil || !strings.Contains(err.Error(), "egress.rulesFile: Line 1:") {
		t.Fatalf("bad reload: %v", err)
	}
	os.WriteFile(profPath, []byte(`{"name":"w","egress":{"rulesFile":"rules.pf"},"bogus":1}`), 0o600)
	if err := d.Reload(context.Background()); err == nil || !strings.Contains(err.Error(), "bogus: unknown field") {
		t.Fatalf("bad profile reload: %v", err)
	}
	if got := check(t, c, req); got != "allow line 1: allow udp 192.0.2.1:53" {
		t.Fatalf("failed reloads changed the policy: %s", got)
	}
}

type failingComponent struct{}

func (failingComponent) Name() string                  { return "proxy" }
func (failingComponent) Run(ctx context.Context) error { return errors.New("bind: address in use") }

func TestFailingComponentStopsDaemon(t *testing.T) {
	d, err := New(context.Background(), Config{LoadProfile: demoLoader, StateDir: filepath.Join(shortTempDir(t), "s"),
		Logger: quiet(), Components: []Component{failingComponent{}}})
	if err != nil {
		t.Fatal(err)
	}
	err = d.Run(context.Background())
	if err == nil || !strings.Contains(err.Error(), "proxy: bind: address in use") {
		t.Fatalf("got %v", err)
	}
	if _, err := os.Stat(d.controlPath); !errors.Is(err, os.ErrNotExist) {
		t.Fatal("control socket left behind")
	}
}

// TestQUICRefusedUnlessAllowed: UDP 443 would carry HTTP past the proxy;
// the built-in last rule refuses it under default allow, and a user rule
// can still allow it.
func TestQUICRefusedUnlessAllowed(t *testing.T) {
	_, c := startDaemon(t, Config{})
	ctx := context.Background()
	quic := control.CheckRequest{Proto: "udp", Hosts: []string{"video.example.test"}, Port: 443}
	c.ApplyRules(ctx, []byte("default allow\n"), "t")
	if got := check(t, c, quic); got != "deny quic: deny udp any:443" {
		t.Fatalf("QUIC under default allow: %s", got)
	}
	c.ApplyRules(ctx, []byte("allow udp video.example.test:443\ndefault allow\n"), "t")
	if got := check(t, c, quic); got != "allow line 1: allow udp video.example.test:443" {
		t.Fatalf("QUIC allowed by a rule: %s", got)
	}
}

func TestSummarize(t *testing.T) {
	p := func(s string) *rules.Policy {
		pol, err := rules.ParseString(s)
		if err != nil {
			t.Fatal(err)
		}
		return pol
	}
	tests := []struct {
		before, after  string
		added, removed int
		reordered      bool
	}{
		{"allow tcp a.test\n", "allow tcp a.test\n", 0, 0, false},
		{"allow tcp a.test\nallow tcp a.test\n", "allow tcp a.test\n", 0, 1, false},
		{"allow tcp a.test\nallow tcp b.test\n", "allow tcp b.test\nallow tcp a.test\n", 0, 0, true},
		{"allow tcp a.test\n", "allow tcp A.TEST.\nallow udp b.test\n", 1, 0, false},
	}
	for _, tt := range tests {
		r := summarize(p(tt.before), p(tt.after))
		if len(r.Added) != tt.added || len(r.Removed) != tt.removed || r.Reordered != tt.reordered {
			t.Errorf("%q -> %q: %+v", tt.before, tt.after, r)
		}
	}
}
