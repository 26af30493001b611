package audit

import "time"

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

	// Reason explains a decision in words, e.g. why a flow was denied
	// other than by a rule.
	Reason string `json:"reason,omitempty"`
}
