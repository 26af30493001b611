package audit

import (
	"time"

	"guard/firewall"
)

// Event types (DESIGN.md §Events).
const (
	TypeFirewall     = "egress.firewall"
	TypePolicyChange = "policy.change"
	TypeBlock        = "guardrails.block"
	TypeConsent      = "guardrails.consent"
	TypeCredUse      = "credential.use"
	TypeCompromise   = "credential.compromise"
)

// Layers at which egress.firewall decisions are made.
const (
	LayerL4   = "l4"
	LayerSNI  = "sni"
	LayerHTTP = "http"
)

// Rule names the rule behind a decision.
type Rule struct {
	Line   int    `json:"line"`
	Text   string `json:"text"`
	Origin string `json:"origin"`
}

// Event is one line of the timeline. Time, Workspace and Type are always
// set; the rest depends on the type.
type Event struct {
	Time      time.Time `json:"time"`
	Workspace string    `json:"workspace"`
	Type      string    `json:"type"`

	// egress.firewall
	Action    string   `json:"action,omitempty"`
	Layer     string   `json:"layer,omitempty"`
	Proto     string   `json:"proto,omitempty"`
	Host      string   `json:"host,omitempty"`
	IP        string   `json:"ip,omitempty"`
	Port      int      `json:"port,omitempty"`
	Method    string   `json:"method,omitempty"`
	Hostnames []string `json:"hostnames,omitempty"`
	Rule      *Rule    `json:"rule,omitempty"`

	// policy.change
	Source  string `json:"source,omitempty"`
	Rules   int    `json:"rules,omitempty"`
	Default string `json:"default,omitempty"`
	Added   int    `json:"added,omitempty"`
	Removed int    `json:"removed,omitempty"`

	// guardrails.block and guardrails.consent: the classified operation
	// (Method above too), the write policy, and the question and its answer.
	Service   string `json:"service,omitempty"`
	Scope     string `json:"scope,omitempty"`
	Class     string `json:"class,omitempty"`
	Mode      string `json:"mode,omitempty"`
	Path      string `json:"path,omitempty"`
	Kind      string `json:"kind,omitempty"`
	Question  string `json:"question,omitempty"`
	Operation string `json:"operation,omitempty"`
	Choice    string `json:"choice,omitempty"`
	Waiting   int    `json:"waiting,omitempty"`

	// Reason explains a decision in words, e.g. why a flow was denied
	// other than by a rule.
	Reason string `json:"reason,omitempty"`
}

// Bounds on text from the VM in events: the timeline must not be floodable.
const (
	maxEventNames = 16
	maxEventField = 256
)

// Truncate bounds a VM-supplied string for an event.
func Truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

// FlowEvent is the egress.firewall event for one decision. Names and method
// come from the VM, so they are copied and bounded.
func FlowEvent(layer string, f firewall.Flow, v firewall.Verdict) Event {
	names := make([]string, 0, min(len(f.Names), maxEventNames))
	for _, n := range f.Names[:min(len(f.Names), maxEventNames)] {
		names = append(names, Truncate(n, maxEventField))
	}
	ev := Event{
		Type:      TypeFirewall,
		Action:    v.Action.String(),
		Layer:     layer,
		Proto:     f.Proto.String(),
		Port:      int(f.Port),
		Method:    Truncate(f.Method, maxEventField),
		Hostnames: names,
		Rule:      &Rule{Line: v.Rule.Line, Text: Truncate(v.Rule.Text, 2*maxEventField), Origin: v.Rule.Origin},
	}
	if len(names) > 0 {
		ev.Host = names[0]
	}
	if f.IP.IsValid() {
		ev.IP = firewall.CanonicalIP(f.IP).String()
	}
	return ev
}
