package netstack

import (
	"context"
	"io"
	"sync"
	"sync/atomic"

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
	viaProxy bool // intercepted: the proxy applies web rules per request
	cut      func()
	// serverName is the TLS server name the proxy saw on it, if any: a
	// splice is decided again by it too.
	serverName atomic.Pointer[string]
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

func (o *openFlows) register(of *openFlow) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.flows == nil {
		o.flows = map[*openFlow]struct{}{}
	}
	o.flows[of] = struct{}{}
}

func (o *openFlows) remove(of *openFlow) {
	o.mu.Lock()
	defer o.mu.Unlock()
	delete(o.flows, of)
}

func (o *openFlows) all() []*openFlow {
	o.mu.Lock()
	defer o.mu.Unlock()
	out := make([]*openFlow, 0, len(o.flows))
	for of := range o.flows {
		out = append(out, of)
	}
	return out
}

// condemned says whether m no longer lets the flow stay open: it denies
// it (by its address and names, or by the server name seen on it), or it
// is a splice that a web rule now wants intercepted (a splice cannot apply
// methods; the client's next connection goes to the proxy).
func condemned(m *firewall.Matcher, of *openFlow) (firewall.Verdict, bool) {
	v := m.Verdict(of.flow)
	if sni := of.serverName.Load(); sni != nil {
		f := of.flow
		f.Names = []string{*sni}
		v = firewall.Stricter(v, m.Verdict(f))
	}
	return v, v.Action == firewall.Deny || (v.Action == firewall.Intercept && !of.viaProxy)
}

// track registers a flow, then decides it once more against the policy in
// force: a change that landed between the flow's decision and now (the VM
// can hold its handshake's last ACK for a minute) must not miss it.
func (n *Stack) track(of *openFlow) {
	n.open.register(of)
	if n.cfg.Policy == nil {
		return
	}
	if v, cut := condemned(n.cfg.Policy.Load(), of); cut {
		n.cutFlow(of, v)
	}
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
		m := n.cfg.Policy.Load()
		for _, of := range n.open.all() {
			if v, cut := condemned(m, of); cut {
				n.cutFlow(of, v)
			}
		}
	}
}

// cutFlow closes a flow the policy no longer allows, with its event.
func (n *Stack) cutFlow(of *openFlow, v firewall.Verdict) {
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
