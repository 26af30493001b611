package control

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"

	"guard/audit"
	"guard/workspace"
)

// EnvControl overrides the control socket path for guardctl.
const EnvControl = "GUARD_CONTROL"

// Client talks to one guardd.
type Client struct {
	socket string
	http   *http.Client
}

// NewClient returns a client for the socket at path.
func NewClient(path string) *Client {
	dialer := &net.Dialer{}
	return &Client{
		socket: path,
		http: &http.Client{Transport: &http.Transport{
			// The control socket is local; never let proxy settings near it.
			Proxy: nil,
			DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
				if err := checkSocketOwner(path); err != nil {
					return nil, err
				}
				return dialer.DialContext(ctx, "unix", path)
			},
		}},
	}
}

// checkSocketOwner refuses a socket that belongs to another user: a
// guardctl pointed into a shared directory must not take another user's
// fake guardd at its word.
func checkSocketOwner(path string) error {
	st, err := os.Lstat(path)
	if err != nil {
		return &net.OpError{Op: "dial", Net: "unix", Err: err}
	}
	if sys, ok := st.Sys().(*syscall.Stat_t); ok {
		if uid := int(sys.Uid); uid != os.Getuid() && uid != 0 {
			return fmt.Errorf("control socket %s belongs to uid %d, not to you; refusing to use it", path, uid)
		}
	}
	return nil
}

// UnreachableError means no guardd answered on the socket.
type UnreachableError struct {
	Socket string
	Err    error
}

func (e *UnreachableError) Error() string {
	return fmt.Sprintf("cannot reach guardd at %s: %v (is guardd running? pass --control SOCK or set %s)", e.Socket, e.Err, EnvControl)
}

func (e *UnreachableError) Unwrap() error { return e.Err }

// RejectedError is a refusal from guardd, such as a rules file with errors.
type RejectedError struct {
	Status int
	Body   ErrorBody
}

func (e *RejectedError) Error() string {
	if len(e.Body.Lines) == 0 {
		return e.Body.Error
	}
	return strings.Join(e.Body.Lines, "\n") + "\n" + e.Body.Error
}

func (c *Client) do(ctx context.Context, method, path string, in, out any) error {
	resp, err := c.send(ctx, method, path, in)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if out == nil {
		return nil
	}
	if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
		return fmt.Errorf("guardd sent a bad response: %w", err)
	}
	return nil
}

// send performs a request and turns non-2xx answers into errors.
func (c *Client) send(ctx context.Context, method, path string, in any) (*http.Response, error) {
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return nil, err
		}
		body = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, "http://guardd"+path, body)
	if err != nil {
		return nil, err
	}
	if in != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.http.Do(req)
	if err != nil {
		var op *net.OpError
		if errors.As(err, &op) && op.Op == "dial" {
			return nil, &UnreachableError{Socket: c.socket, Err: op.Err}
		}
		return nil, fmt.Errorf("control socket %s: %w", c.socket, err)
	}
	if resp.StatusCode/100 != 2 {
		defer resp.Body.Close()
		var eb ErrorBody
		if err := json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(&eb); err != nil || eb.Error == "" {
			eb.Error = fmt.Sprintf("guardd answered %s", resp.Status)
		}
		return nil, &RejectedError{Status: resp.StatusCode, Body: eb}
	}
	return resp, nil
}

// Status returns the daemon's status.
func (c *Client) Status(ctx context.Context) (Status, error) {
	var s Status
	return s, c.do(ctx, http.MethodGet, "/v1/status", nil, &s)
}

// Rules returns the active policy.
func (c *Client) Rules(ctx context.Context) (RulesView, error) {
	var v RulesView
	return v, c.do(ctx, http.MethodGet, "/v1/rules", nil, &v)
}

// ApplyRules swaps in a new rules file. A rejected file gives a
// *RejectedError whose Body.Lines are the "Line N:" errors.
func (c *Client) ApplyRules(ctx context.Context, text []byte, source string) (ApplyResult, error) {
	var r ApplyResult
	return r, c.do(ctx, http.MethodPost, "/v1/rules", ApplyRequest{Text: string(text), Source: source}, &r)
}

// Check decides a flow against the active policy, without recording it.
func (c *Client) Check(ctx context.Context, req CheckRequest) (CheckResult, error) {
	var r CheckResult
	return r, c.do(ctx, http.MethodPost, "/v1/check", req, &r)
}

// CA returns the workspace CA.
func (c *Client) CA(ctx context.Context) (CAInfo, error) {
	var ca CAInfo
	return ca, c.do(ctx, http.MethodGet, "/v1/ca", nil, &ca)
}

// Events returns the events in the daemon's ring, oldest first.
func (c *Client) Events(ctx context.Context) ([]audit.Event, error) {
	var evs []audit.Event
	return evs, c.do(ctx, http.MethodGet, "/v1/events", nil, &evs)
}

// Follow calls fn with up to backlog recent events and then each new one,
// until ctx ends, fn fails, or guardd stops.
func (c *Client) Follow(ctx context.Context, backlog int, fn func(audit.Event) error) error {
	q := url.Values{"follow": {"1"}, "backlog": {strconv.Itoa(backlog)}}
	resp, err := c.send(ctx, http.MethodGet, "/v1/events?"+q.Encode(), nil)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 4<<20)
	for sc.Scan() {
		var e audit.Event
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			return fmt.Errorf("guardd sent a bad event: %w", err)
		}
		if err := fn(e); err != nil {
			return err
		}
	}
	if ctx.Err() != nil {
		return nil
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("event stream: %w", err)
	}
	return nil
}

// ResolveSocket finds the control socket: the flag, else $GUARD_CONTROL,
// else the only control.sock under the default state root. With several
// workspaces running it asks for a choice rather than guess.
func ResolveSocket(flag string) (string, error) {
	if flag != "" {
		return flag, nil
	}
	if env := os.Getenv(EnvControl); env != "" {
		return env, nil
	}
	root, err := workspace.DefaultStateRoot()
	if err != nil {
		return "", err
	}
	found, _ := filepath.Glob(filepath.Join(root, "*", "control.sock"))
	var live []string
	for _, f := range found {
		if c, err := net.Dial("unix", f); err == nil {
			c.Close()
			live = append(live, f)
		}
	}
	slices.Sort(live)
	switch len(live) {
	case 1:
		return live[0], nil
	case 0:
		return "", &UnreachableError{Socket: filepath.Join(root, "<workspace>", "control.sock"), Err: errors.New("no running guardd found")}
	}
	return "", fmt.Errorf("several guardd are running (%s); pass --control SOCK or set %s", strings.Join(live, ", "), EnvControl)
}
