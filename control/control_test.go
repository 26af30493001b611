package control

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

func shortTempDir(t *testing.T) string {
	dir, err := os.MkdirTemp("", "gc")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

func TestListenReplacesStaleSocket(t *testing.T) {
	path := filepath.Join(shortTempDir(t), "control.sock")
	// A socket file with nobody listening, as a crashed guardd leaves.
	ln, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	ln.(*net.UnixListener).SetUnlinkOnClose(false)
	ln.Close()
	ln2, err := Listen(path)
	if err != nil {
		t.Fatalf("stale socket not replaced: %v", err)
	}
	defer ln2.Close()
	st, _ := os.Stat(path)
	if st.Mode().Perm() != 0o600 {
		t.Fatalf("mode %v", st.Mode().Perm())
	}
	// A live one is refused.
	if _, err := Listen(path); err == nil || !strings.Contains(err.Error(), "another guardd") {
		t.Fatalf("second listener: %v", err)
	}
}

func TestListenRefusesNonSocket(t *testing.T) {
	path := filepath.Join(shortTempDir(t), "control.sock")
	os.WriteFile(path, []byte("precious"), 0o600)
	if _, err := Listen(path); err == nil || !strings.Contains(err.Error(), "not a socket") {
		t.Fatalf("got %v", err)
	}
	if b, _ := os.ReadFile(path); string(b) != "precious" {
		t.Fatal("a regular file was removed")
	}
}

func TestUnreachable(t *testing.T) {
	path := filepath.Join(shortTempDir(t), "none.sock")
	_, err := NewClient(path).Status(context.Background())
	var ue *UnreachableError
	if !errors.As(err, &ue) || !strings.Contains(err.Error(), "cannot reach guardd at "+path) || !strings.Contains(err.Error(), "GUARD_CONTROL") {
		t.Fatalf("got %v", err)
	}
}

// TestClientRefusesForeignSocket: a socket owned by another user could be a
// fake guardd answering "allow"; guardctl must not talk to it. The test
// chowns the socket, which needs root, as the sessions and CI run.
func TestClientRefusesForeignSocket(t *testing.T) {
	path := filepath.Join(shortTempDir(t), "control.sock")
	ln, err := Listen(path)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	if err := os.Lchown(path, 4242, 4242); err != nil {
		t.Fatalf("chown needs root: %v", err)
	}
	_, err = NewClient(path).Status(context.Background())
	if err == nil || !strings.Contains(err.Error(), "belongs to uid 4242") {
		t.Fatalf("got %v", err)
	}
}

// TestForeignPeerRefused: even if the socket's mode were loosened, a peer of
// another uid is cut off by the server. The peer is this test binary re-run
// as uid 4242 (needs root).
func TestForeignPeerRefused(t *testing.T) {
	if os.Getenv("GUARD_TEST_DIAL") != "" {
		return // the child half: see dialAsForeignUser
	}
	dir := shortTempDir(t)
	os.Chmod(dir, 0o755)
	path := filepath.Join(dir, "control.sock")
	ln, err := Listen(path)
	if err != nil {
		t.Fatal(err)
	}
	os.Chmod(path, 0o777)
	srv := NewServer(statusOnly{}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go srv.Serve(ctx, ln)

	// The foreign user cannot reach the go build cache; run a copy.
	self, err := os.ReadFile(os.Args[0])
	if err != nil {
		t.Fatal(err)
	}
	child := filepath.Join(dir, "child.test")
	if err := os.WriteFile(child, self, 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(child, "-test.run=^TestForeignPeerRefusedChild$")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GUARD_TEST_DIAL="+path)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 4242, Gid: 4242}}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("child: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "refused:") {
		t.Fatalf("a foreign uid got an answer:\n%s", out)
	}
}

// statusOnly is a backend that answers status, enough to tell whether a
// request got through.
type statusOnly struct{ Backend }

func (statusOnly) Status() Status { return Status{Workspace: "secret-workspace"} }

// TestForeignPeerRefusedChild runs as the foreign user.
func TestForeignPeerRefusedChild(t *testing.T) {
	path := os.Getenv("GUARD_TEST_DIAL")
	if path == "" {
		return
	}
	c, err := net.Dial("unix", path)
	if err != nil {
		fmt.Println("refused: dial:", err)
		return
	}
	defer c.Close()
	fmt.Fprintf(c, "GET /v1/status HTTP/1.1\r\nHost: guardd\r\n\r\n")
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	buf := make([]byte, 512)
	n, err := c.Read(buf)
	if n == 0 {
		fmt.Println("refused: read:", err)
		return
	}
	fmt.Printf("answered: %q\n", buf[:n])
}

func TestResolveSocket(t *testing.T) {
	root := shortTempDir(t)
	t.Setenv("XDG_STATE_HOME", root)
	t.Setenv(EnvControl, "")
	if got, _ := ResolveSocket("/explicit.sock"); got != "/explicit.sock" {
		t.Fatalf("flag: %s", got)
	}
	if _, err := ResolveSocket(""); err == nil || !strings.Contains(err.Error(), "no running guardd") {
		t.Fatalf("none running: %v", err)
	}
	listen := func(ws string) string {
		dir := filepath.Join(root, "guard", ws)
		os.MkdirAll(dir, 0o700)
		p := filepath.Join(dir, "control.sock")
		ln, err := Listen(p)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { ln.Close() })
		return p
	}
	a := listen("a")
	if got, err := ResolveSocket(""); err != nil || got != a {
		t.Fatalf("one running: %s %v", got, err)
	}
	listen("b")
	if _, err := ResolveSocket(""); err == nil || !strings.Contains(err.Error(), "several guardd") {
		t.Fatalf("two running: %v", err)
	}
	t.Setenv(EnvControl, "/from/env.sock")
	if got, _ := ResolveSocket(""); got != "/from/env.sock" {
		t.Fatalf("env: %s", got)
	}
}

func TestCheckRequestValidation(t *testing.T) {
	tests := []struct {
		req  CheckRequest
		want string
	}{
		{CheckRequest{Proto: "icmp", IP: "1.1.1.1", Port: 1}, "--proto must be tcp or udp"},
		{CheckRequest{Proto: "tcp", IP: "1.1.1.1", Port: 0}, "--port 0 out of range"},
		{CheckRequest{Proto: "tcp", IP: "1.1.1.1", Port: 65536}, "out of range"},
		{CheckRequest{Proto: "tcp", IP: "1.1.1", Port: 1}, "not an IP address"},
		{CheckRequest{Proto: "tcp", Port: 1}, "at least one --host"},
		{CheckRequest{Proto: "tcp", Hosts: []string{"a b"}, Port: 1}, "--host"},
		{CheckRequest{Proto: "udp", Hosts: []string{"x.test"}, Port: 1, Method: "GET"}, "--method needs --proto tcp"},
		{CheckRequest{Proto: "tcp", Hosts: []string{"x.test"}, Port: 1, Method: "GE T"}, "not an HTTP method"},
	}
	for _, tt := range tests {
		if _, err := tt.req.Flow(); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%+v: %v, want %q", tt.req, err, tt.want)
		}
	}
	f, err := CheckRequest{Proto: "TCP", Hosts: []string{"[2001:db8::1]", "Example.com."}, IP: "::ffff:10.0.0.1", Port: 443, Method: "get"}.Flow()
	if err != nil || f.Port != 443 || len(f.Names) != 2 || f.Method != "get" {
		t.Fatalf("%+v %v", f, err)
	}
}
