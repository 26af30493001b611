package netstack

import (
	"context"
	"io"
	"sync"

	"guard/audit"
	"guard/firewall"
)

// Watched is the policy in force, with word of each change;
// *firewall.Active satisfies it.
type Watched interface {
	Policy
	Changed() <-chan struct{}
}

// Recorder writes events; *audit.Log satisfies it.
type Recorder interface {
	Emit(ctx context.Context, e audit.Event) error
}

// openFlow is a live flow of the VM's, as it was decided.
type openFlow struct {
	flow     firewall.Flow
	viaProxy bool // in the proxy, which applies web rules per request
	cut      func()
}

// openFlows are the VM's live TCP and UDP flows. When the policy changes,
// each is decided again and those the new policy denies are cut: a rules
// change is how a person stops an agent, and a long-lived connection (an
// ssh session, a websocket, a tunnel) must not outlive the decision that
// let it open.
type openFlows struct {
	mu    sync.Mutex
	flows map[*openFlow]struct{}
}

// add registers a flow; the returned func removes it once it has ended.
func (o *openFlows) add(f firewall.Flow, viaProxy bool, cut func()) (remove func()) {
	of := &openFlow{flow: f, viaProxy: viaProxy, cut: cut}
	o.mu.Lock()
	if o.flows == nil {
		o.flows = map[*openFlow]struct{}{}
	}
	o.flows[of] = struct{}{}
	o.mu.Unlock()
	return func() {
		o.mu.Lock()
		delete(o.flows, of)
		o.mu.Unlock()
	}
}

// condemned returns the flows that m no longer lets stay open: those it
// denies, and spliced ones that a web rule now wants intercepted (a splice
// cannot apply methods; the client's next connection goes to the proxy).
func (o *openFlows) condemned(m *firewall.Matcher) (out []*openFlow, verdicts []firewall.Verdict) {
	o.mu.Lock()
	defer o.mu.Unlock()
	for of := range o.flows {
		v := m.Verdict(of.flow)
		if v.Action == firewall.Deny || (v.Action == firewall.Intercept && !of.viaProxy) {
			out = append(out, of)
			verdicts = append(verdicts, v)
		}
	}
	return out, verdicts
}

// watchPolicy re-decides the open flows after every policy change.
func (n *Stack) watchPolicy() {
	for {
		changed := n.cfg.Policy.Changed()
		select {
		case <-n.ctx.Done():
			return
		case <-changed:
		}
		n.pings.forget() // the next echo of every ping session is decided anew
		flows, verdicts := n.open.condemned(n.cfg.Policy.Load())
		for i, of := range flows {
			v := verdicts[i]
			ev := audit.FlowEvent(audit.LayerL4, of.flow, v)
			ev.Action = firewall.Deny.String()
			ev.Reason = "an open flow cut by a policy change"
			if v.Action == firewall.Intercept {
				ev.Reason = "an open spliced flow cut: a web rule now wants it intercepted"
			}
			if n.cfg.Events != nil {
				n.cfg.Events.Emit(n.ctx, ev)
			}
			n.cfg.Logger.Info("egress.firewall", "action", "deny", "layer", audit.LayerL4, "ip", ev.IP, "port", ev.Port, "reason", ev.Reason, "rule", v.Rule.String())
			of.cut()
		}
	}
}

// connSet closes a flow's connections together; one added after the cut is
// closed at once.
type connSet struct {
	mu    sync.Mutex
	conns []io.Closer
	cut   bool
}

// add joins c to the set; false means the flow was already cut.
func (s *connSet) add(c io.Closer) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cut {
		c.Close()
		return false
	}
	s.conns = append(s.conns, c)
	return true
}

func (s *connSet) closeAll() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.cut = true
	for _, c := range s.conns {
		c.Close()
	}
}
