package daemon

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"strings"

	"guard/audit"
	"guard/classify"
	"guard/consent"
	"guard/proxy"
)

// guardrails is the proxy's guardrails hook: it classifies a request to a
// known service, applies that service's write policy (consent.Decide), and
// asks a person through the broker when the policy says to. Requests to
// services it does not know pass untouched; the firewall rules still
// apply to them.
type guardrails struct {
	d *Daemon
}

func (g guardrails) Check(ctx context.Context, r *http.Request) (*proxy.Block, error) {
	host := strings.ToLower(strings.TrimSuffix(hostOnly(r.Host), "."))
	service := classify.ForgeService(host)
	if service == "" {
		return nil, nil
	}
	op := classify.Forge(service, classify.NewRequest(r.Method, host, r.URL.Path, r.URL.RawQuery, r.Header))
	prof := g.d.currentProfile()
	mode := consent.Mode(prof.Mode(op.Service))
	switch consent.Decide(mode, op.Class) {
	case consent.Allow:
		return nil, nil
	case consent.Ask:
		d := g.d.broker.Ask(ctx, consent.Question{Kind: consent.KindWrite, Workspace: prof.Name, Scope: op.Scope, Operation: op.Detail})
		if d.Allow {
			return nil, nil
		}
		return g.block(ctx, r, op, mode, fmt.Sprintf("%s on %q was not allowed (%s); blocked by guardrails", op.Detail, op.Scope, d.Reason))
	}
	return g.block(ctx, r, op, mode, fmt.Sprintf("%s (%s) is not allowed while %q is %s; blocked by guardrails", op.Detail, op.Class, op.Scope, mode))
}

// block records the guardrails.block event and renders the refusal.
func (g guardrails) block(ctx context.Context, r *http.Request, op classify.Operation, mode consent.Mode, message string) (*proxy.Block, error) {
	g.d.events.Emit(ctx, audit.Event{Type: audit.TypeBlock, Service: op.Service, Scope: op.Scope, Class: string(op.Class),
		Mode: string(mode), Method: audit.Truncate(r.Method, 64), Path: audit.Truncate(r.URL.Path, 512), Reason: message})
	return proxy.JSONRenderer{}.Render(r, message), nil
}

func hostOnly(hostport string) string {
	if h, _, err := net.SplitHostPort(hostport); err == nil {
		return h
	}
	return hostport
}

// consentRecorder puts the broker's answers on the timeline.
type consentRecorder struct {
	events *audit.Log
}

func (c consentRecorder) RecordConsent(ctx context.Context, r consent.Record) error {
	action := "deny"
	if r.Allow {
		action = "allow"
	}
	return c.events.Emit(ctx, audit.Event{Type: audit.TypeConsent, Action: action, Kind: string(r.Question.Kind),
		Scope: r.Question.Scope, Question: r.Question.Title(), Operation: audit.Truncate(r.Question.Operation, 4096),
		Choice: r.Choice, Waiting: r.Waiting, Reason: r.Reason})
}
