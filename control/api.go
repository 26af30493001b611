package control

import (
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"time"

	"guard/firewall"
	"guard/rules"
)

// Status describes a running guardd.
type Status struct {
	Workspace    string            `json:"workspace"`
	PID          int               `json:"pid"`
	Started      time.Time         `json:"started"`
	Profile      string            `json:"profile"`
	StateDir     string            `json:"stateDir"`
	Control      string            `json:"control"`
	EventLog     string            `json:"eventLog"`
	Events       uint64            `json:"events"`
	Rules        int               `json:"rules"`
	Default      string            `json:"default"`
	RulesSource  string            `json:"rulesSource"`
	RulesChanged time.Time         `json:"rulesChanged"`
	Components   []ComponentStatus `json:"components"`
	Warnings     []string          `json:"warnings,omitempty"`
}

// CAInfo is the workspace CA, for VM trust stores.
type CAInfo struct {
	Path string `json:"path"`
	PEM  string `json:"pem"`
}

// ComponentStatus is the state of one plugged-in part (proxy, netstack).
type ComponentStatus struct {
	Name  string `json:"name"`
	State string `json:"state"`
}

// RulesView is the active policy.
type RulesView struct {
	// Text is the policy in canonical form.
	Text string `json:"text"`
	// Exemptions are the rules placed before it, e.g. local inference, as
	// "origin: rule".
	Exemptions []string  `json:"exemptions,omitempty"`
	Source     string    `json:"source"`
	Changed    time.Time `json:"changed"`
}

// ApplyRequest carries a rules file to swap in.
type ApplyRequest struct {
	Text string `json:"text"`
	// Source names the file, for the event log.
	Source string `json:"source"`
}

// ApplyResult summarizes a swap.
type ApplyResult struct {
	Rules         int      `json:"rules"`
	Default       string   `json:"default"`
	DefaultBefore string   `json:"defaultBefore"`
	Added         []string `json:"added,omitempty"`
	Removed       []string `json:"removed,omitempty"`
	// Reordered is set when the same rules now stand in another order,
	// which changes first-match results.
	Reordered bool `json:"reordered,omitempty"`
}

// Unchanged reports whether the new policy is the old one.
func (r ApplyResult) Unchanged() bool {
	return len(r.Added) == 0 && len(r.Removed) == 0 && !r.Reordered && r.Default == r.DefaultBefore
}

// CheckRequest is a flow to decide, as guardctl rules check gives it.
type CheckRequest struct {
	Proto  string   `json:"proto"`
	Hosts  []string `json:"hosts,omitempty"`
	IP     string   `json:"ip,omitempty"`
	Port   int      `json:"port"`
	Method string   `json:"method,omitempty"`
}

// CheckResult is a verdict with its rule.
type CheckResult struct {
	Verdict string           `json:"verdict"`
	Rule    firewall.RuleRef `json:"rule"`
	Default bool             `json:"default"`
}

// ErrorBody is the JSON body of a failed control request.
type ErrorBody struct {
	Error string `json:"error"`
	// Lines are the "Line N: ..." errors of a rejected rules file.
	Lines []string `json:"lines,omitempty"`
}

// Flow validates a check request and turns it into a firewall flow.
func (r CheckRequest) Flow() (firewall.Flow, error) {
	var f firewall.Flow
	proto, err := firewall.ParseProto(r.Proto)
	if err != nil || proto == firewall.ICMP {
		return f, fmt.Errorf("--proto must be tcp or udp, not %q", r.Proto)
	}
	f.Proto = proto
	if r.Port < 1 || r.Port > 65535 {
		return f, fmt.Errorf("--port %d out of range (1-65535)", r.Port)
	}
	f.Port = uint16(r.Port)
	if r.IP != "" {
		a, err := netip.ParseAddr(strings.TrimSuffix(strings.TrimPrefix(r.IP, "["), "]"))
		if err != nil {
			return f, fmt.Errorf("--ip %q is not an IP address", r.IP)
		}
		f.IP = a
	}
	for _, h := range r.Hosts {
		if _, err := netip.ParseAddr(strings.TrimSuffix(strings.TrimPrefix(h, "["), "]")); err == nil {
			continue
		}
		if _, err := rules.NormalizeHost(h); err != nil {
			return f, fmt.Errorf("--host: %w", err)
		}
	}
	f.Names = r.Hosts
	if r.Method != "" {
		if proto != firewall.TCP {
			return f, errors.New("--method needs --proto tcp: web requests run over TCP")
		}
		for _, c := range r.Method {
			if c <= ' ' || c >= 0x7f || strings.ContainsRune(`"(),/:;<=>?@[\]{}`, c) {
				return f, fmt.Errorf("--method %q is not an HTTP method", r.Method)
			}
		}
		f.Method = r.Method
	}
	if len(r.Hosts) == 0 && r.IP == "" {
		return f, errors.New("give at least one --host or an --ip")
	}
	return f, nil
}

// ResultOf turns a verdict into a check result.
func ResultOf(v firewall.Verdict) CheckResult {
	return CheckResult{Verdict: v.Action.String(), Rule: v.Rule, Default: v.Default()}
}
