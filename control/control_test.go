package control

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
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
