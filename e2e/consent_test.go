package e2e

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"guard/internal/testpki"
)

// tmux drives one detached tmux session on a private server socket.
type tmux struct {
	t      *testing.T
	socket string
	name   string
}

func newTmux(t *testing.T, dir string, width, height int, command string) *tmux {
	t.Helper()
	if _, err := exec.LookPath("tmux"); err != nil {
		t.Fatal("tmux is needed: .ci/run installs it")
	}
	x := &tmux{t: t, socket: filepath.Join(dir, "tmux.sock"), name: "prompt"}
	x.run("new-session", "-d", "-s", x.name, "-x", fmt.Sprint(width), "-y", fmt.Sprint(height), command)
	t.Cleanup(func() { exec.Command("tmux", "-S", x.socket, "kill-server").Run() })
	return x
}

func (x *tmux) run(args ...string) string {
	x.t.Helper()
	cmd := exec.Command("tmux", append([]string{"-S", x.socket}, args...)...)
	cmd.Env = append(os.Environ(), "TERM=xterm-256color")
	out, err := cmd.CombinedOutput()
	if err != nil {
		x.t.Fatalf("tmux %v: %v\n%s", args, err, out)
	}
	return string(out)
}

// screen is what the pane shows now.
func (x *tmux) screen() string { return x.run("capture-pane", "-p", "-t", x.name) }

// waitFor polls the pane until it shows want.
func (x *tmux) waitFor(want string) string {
	x.t.Helper()
	var s string
	for deadline := time.Now().Add(15 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if s = x.screen(); strings.Contains(s, want) {
			return s
		}
	}
	x.t.Fatalf("the pane never showed %q; it shows:\n%s", want, s)
	return ""
}

func (x *tmux) keys(keys ...string) { x.run(append([]string{"send-keys", "-t", x.name}, keys...)...) }

// consentCanary is the credential's real value in the consent test.
const consentCanary = "ghp_CONSENTcanaryCONSENTcanaryCONSENT1"

// TestConsentAtTheWire: a write to GitHub under promptOnWrite waits at the
// proxy while guardctl prompt, in a real tmux pane, shows the question; the
// key pressed decides whether the request completes or gets its 403.
func TestConsentAtTheWire(t *testing.T) {
	pki := testpki.New(t)
	port := serveHTTPS(t, "127.0.0.3", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		if r.Header.Get("Authorization") == "token "+consentCanary {
			fmt.Fprintf(w, "github did %s %s with the real token", r.Method, r.URL.Path)
			return
		}
		fmt.Fprintf(w, "github did %s %s", r.Method, r.URL.Path)
	}), serverTLS(t, pki, "api.github.com"))

	dir := shortDir(t)
	writeFile(t, dir, "upstream-ca.pem", string(pki.PEM))
	prof := writeFile(t, dir, "profile.json", `{"name":"consent-e2e",
	  "credentials":[{"id":"gh","title":"GitHub","service":"github","hosts":["github.com"],"askBeforeUse":true,
	    "secret":{"value":"`+consentCanary+`"}}],
	  "guardrails":{"github":"promptOnWrite"},
	  "egress":{"rules":"allow web api.github.com\ndefault deny\n","upstreamCAs":["upstream-ca.pem"]},
	  "dns":{"hosts":{"api.github.com":"127.0.0.3"}},
	  "consent":{"timeoutSeconds":30}}`)
	proxyAddr := freeLoopbackAddr(t)
	g := startGuardd(t, "--profile", prof, "--proxy-listen", proxyAddr)
	caPEM, _ := g.ctl(t, "ca", "export")
	caFile := writeFile(t, dir, "guard-ca.pem", caPEM)
	base := fmt.Sprintf("https://api.github.com:%d", port)
	// curl runs in the background; its result arrives on the channel.
	curl := func(args ...string) <-chan string {
		out := make(chan string, 1)
		go func() {
			cmd := exec.Command("curl", append([]string{"-sS", "--max-time", "60", "--proxy", "http://" + proxyAddr, "--cacert", caFile}, args...)...)
			cmd.Env = []string{"PATH=/usr/bin:/bin"}
			b, _ := cmd.CombinedOutput()
			out <- string(b)
		}()
		return out
	}
	result := func(ch <-chan string) string {
		select {
		case s := <-ch:
			return s
		case <-time.After(30 * time.Second):
			t.Fatal("the request never completed")
		}
		return ""
	}

	// With no prompt attached, a write is refused at once.
	if out := result(curl("-X", "POST", base+"/repos/acme/site/issues")); !strings.Contains(out, "no prompter is attached") || !strings.Contains(out, "blocked by guardrails") {
		t.Fatalf("write with no prompt: %s", out)
	}
	// Reads pass without a question.
	if out := result(curl(base + "/repos/acme/site")); out != "github did GET /repos/acme/site" {
		t.Fatalf("read: %s", out)
	}

	pane := newTmux(t, dir, 100, 30, fmt.Sprintf("%s --control %s prompt", filepath.Join(bin, "guardctl"), g.control))
	pane.waitFor("no questions waiting")

	// 1. Allow once: the request completes, and the next write asks again.
	first := curl("-X", "POST", "-d", "{}", base+"/repos/acme/site/issues")
	s := pane.waitFor(`Allow write on "github" from workspace "consent-e2e"?`)
	for _, want := range []string{"POST /repos/acme/site/issues", "1) Allow for 15 minutes   [Enter]", "2) Allow once", "4) Don't allow"} {
		if !strings.Contains(s, want) {
			t.Fatalf("the prompt lacks %q:\n%s", want, s)
		}
	}
	// The pane survives a resize and redraws.
	pane.run("resize-window", "-t", "prompt", "-x", "60", "-y", "20")
	pane.waitFor("POST /repos/acme/site/issues")
	pane.keys("2")
	if out := result(first); out != "github did POST /repos/acme/site/issues" {
		t.Fatalf("after allow once: %s", out)
	}
	pane.waitFor("no questions waiting")

	// 2. Two different writes wait together; the prompt says so. Ctrl-C
	// denies the one on screen, 4 denies the next (and remembers it).
	second := curl("-X", "DELETE", base+"/repos/acme/site")
	pane.waitFor("DELETE /repos/acme/site")
	third := curl("-X", "PATCH", "-d", "{}", base+"/repos/acme/other")
	pane.waitFor("1 more waiting")
	pane.keys("C-c")
	if out := result(second); !strings.Contains(out, "blocked by guardrails") || !strings.Contains(out, "Don't allow") {
		t.Fatalf("after Ctrl-C: %s", out)
	}
	// The denial settles the other waiting write of the same scope.
	if out := result(third); !strings.Contains(out, "blocked by guardrails") {
		t.Fatalf("queued write after the denial: %s", out)
	}
	// 3. The denial is remembered: the next write is refused without a question.
	if out := result(curl("-X", "POST", base+"/repos/acme/site/pulls")); !strings.Contains(out, "remembered") {
		t.Fatalf("write after a denial: %s", out)
	}
	list, _ := g.ctl(t, "approvals", "list")
	if !strings.Contains(list, "deny") || !strings.Contains(list, "github") {
		t.Fatalf("approvals list:\n%s", list)
	}
	if out, code := g.ctl(t, "approvals", "revoke-all"); code != 0 || !strings.Contains(out, "revoked 1") {
		t.Fatalf("revoke-all: %d %s", code, out)
	}

	// 4. Enter takes the default, a 15-minute grant: later writes pass
	// without a question until it is revoked.
	fourth := curl("-X", "PUT", "-d", "{}", base+"/repos/acme/site/topics")
	pane.waitFor("PUT /repos/acme/site/topics")
	pane.keys("Enter")
	if out := result(fourth); out != "github did PUT /repos/acme/site/topics" {
		t.Fatalf("after Enter: %s", out)
	}
	if out := result(curl("-X", "POST", base+"/repos/acme/site/labels")); out != "github did POST /repos/acme/site/labels" {
		t.Fatalf("write under the grant: %s", out)
	}
	list, _ = g.ctl(t, "approvals")
	var id string
	for _, l := range strings.Split(list, "\n") {
		if f := strings.Fields(l); len(f) > 0 && strings.HasPrefix(f[0], "g") && strings.Contains(l, "allow") {
			id = f[0]
		}
	}
	if id == "" || !(strings.Contains(list, "15m0s") || strings.Contains(list, "14m")) {
		t.Fatalf("approvals after the grant:\n%s", list)
	}
	if out, code := g.ctl(t, "approvals", "revoke", id); code != 0 {
		t.Fatalf("revoke: %s", out)
	}
	// 6. Ask before use: the first use of the credential asks; "1 hour"
	// lets this and later uses through with the real token.
	out, _ := g.ctl(t, "credentials", "list", "--json")
	var creds []struct{ Fake string }
	if json.Unmarshal([]byte(out), &creds) != nil || len(creds) != 1 {
		t.Fatalf("credentials list: %s", out)
	}
	used := curl("-H", "Authorization: token "+creds[0].Fake, base+"/user")
	pane.waitFor(`Allow "consent-e2e" to use credential "GitHub"?`)
	pane.keys("2")
	if out := result(used); out != "github did GET /user with the real token" {
		t.Fatalf("after allowing use: %s", out)
	}
	if out := result(curl("-H", "Authorization: token "+creds[0].Fake, base+"/user")); out != "github did GET /user with the real token" {
		t.Fatalf("a second use under the grant: %s", out)
	}
	if list, _ := g.ctl(t, "approvals"); !strings.Contains(list, "use") || !strings.Contains(list, "gh") {
		t.Fatalf("approvals after a use grant:\n%s", list)
	}

	fifth := curl("-X", "POST", base+"/repos/acme/site/labels")
	pane.waitFor("POST /repos/acme/site/labels")

	// 5. A prompt that goes away mid-question denies it: the pane is closed.
	pane.keys("q") // not a choice while a question is shown
	pane.run("kill-session", "-t", "prompt")
	if out := result(fifth); !strings.Contains(out, "blocked by guardrails") {
		t.Fatalf("after the prompt quit: %s", out)
	}

	ev, _ := g.ctl(t, "events", "--json")
	for _, want := range []string{`"type":"guardrails.consent"`, `"choice":"once"`, `"choice":"deny"`, `"choice":"15m"`, `"type":"guardrails.block"`} {
		if !strings.Contains(ev, want) {
			t.Errorf("events lack %s", want)
		}
	}
}
