package netstack

import (
	"context"
	"net/netip"
	"sync"
	"time"

	"gvisor.dev/gvisor/pkg/buffer"
	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/checksum"
	"gvisor.dev/gvisor/pkg/tcpip/header"
	"gvisor.dev/gvisor/pkg/tcpip/network/ipv4"
	"gvisor.dev/gvisor/pkg/tcpip/stack"

	"guard/audit"
	"guard/firewall"
)

// Limits of ICMP echo forwarding.
const (
	// maxPings bounds echo requests waiting for their destination; past
	// it requests are dropped, as a congested router would.
	maxPings = 64
	// pingWait is how long a destination has to answer.
	pingWait = 5 * time.Second
	// pingFlowIdle is how long a ping session (destination and echo
	// identifier) keeps its decision, so that `ping` is one event, not
	// one a second. A policy change makes every session decide again.
	pingFlowIdle  = 10 * time.Second
	maxPingFlows  = 1024
	replyTTL      = 64
	echoHeaderLen = header.ICMPv4MinimumSize
)

// echoRequest is what is kept of the VM's echo request once the packet
// buffer is gone.
type echoRequest struct {
	src, dst netip.Addr
	ident    uint16
	seq      uint16
	payload  []byte
	original []byte // the IP header and 8 bytes of the request, for errors
}

type pingKey struct {
	dst   netip.Addr
	ident uint16
}

type pingFlow struct {
	action firewall.Action
	last   time.Time
	// policy is the matcher in force when it was decided; under another,
	// the session is decided again.
	policy *firewall.Matcher
}

// pings holds the decided ping sessions and the slots of echoes in flight.
type pings struct {
	slots chan struct{}
	mu    sync.Mutex
	flows map[pingKey]pingFlow
}

func newPings() *pings {
	return &pings{slots: make(chan struct{}, maxPings), flows: map[pingKey]pingFlow{}}
}

// forget drops the remembered decisions, after a policy change.
func (p *pings) forget() {
	p.mu.Lock()
	defer p.mu.Unlock()
	clear(p.flows)
}

// handleICMP takes the VM's echo requests to destinations other than the
// gateway (which the stack answers itself). It runs on the link's
// delivery path, so everything slow happens in a goroutine.
func (n *Stack) handleICMP(_ stack.TransportEndpointID, pkt *stack.PacketBuffer) bool {
	h := header.ICMPv4(pkt.TransportHeader().Slice())
	if len(h) < echoHeaderLen || h.Type() != header.ICMPv4Echo || h.Code() != 0 {
		return false
	}
	if checksum.Checksum(h, pkt.Data().Checksum()) != 0xffff {
		return true // dropped: a corrupt request gets no answer
	}
	ip := header.IPv4(pkt.NetworkHeader().Slice())
	dst := addrOfTCPIP(ip.DestinationAddress())
	if dst == n.cfg.Gateway.Addr() {
		return false
	}
	req := &echoRequest{
		src:     addrOfTCPIP(ip.SourceAddress()),
		dst:     dst,
		ident:   h.Ident(),
		seq:     h.Sequence(),
		payload: pkt.Data().AsRange().ToSlice(),
	}
	// RFC 792: an error quotes the IP header and the first 8 bytes of the
	// datagram, here the echo header.
	req.original = append(append([]byte(nil), ip[:ip.HeaderLength()]...), h[:echoHeaderLen]...)
	select {
	case n.pings.slots <- struct{}{}:
	default:
		return true
	}
	n.wg.Go(func() {
		defer func() { <-n.pings.slots }()
		n.forwardEcho(req)
	})
	return true
}

// forwardEcho decides a ping session, then pings the destination from the
// host and relays the answer, or tells the VM it is filtered.
func (n *Stack) forwardEcho(req *echoRequest) {
	if n.decidePing(req) == firewall.Deny {
		n.sendFiltered(req)
		return
	}
	if n.cfg.Pinger == nil || !dialable(req.dst) {
		return
	}
	ctx, cancel := context.WithTimeout(n.ctx, pingWait)
	defer cancel()
	if err := n.cfg.Pinger.Echo(ctx, req.dst, req.seq, req.payload); err != nil {
		return
	}
	msg := make([]byte, echoHeaderLen+len(req.payload))
	e := header.ICMPv4(msg)
	e.SetType(header.ICMPv4EchoReply)
	e.SetIdent(req.ident)
	e.SetSequence(req.seq)
	copy(msg[echoHeaderLen:], req.payload)
	n.writeICMP(req.dst, req.src, msg)
}

// decidePing decides the first echo of a session and remembers it.
func (n *Stack) decidePing(req *echoRequest) firewall.Action {
	key := pingKey{dst: req.dst, ident: req.ident}
	now := time.Now()
	var current *firewall.Matcher
	if n.cfg.Policy != nil {
		current = n.cfg.Policy.Load()
	}
	p := n.pings
	p.mu.Lock()
	if f, ok := p.flows[key]; ok && now.Sub(f.last) < pingFlowIdle && f.policy == current {
		f.last = now
		p.flows[key] = f
		p.mu.Unlock()
		return f.action
	}
	p.mu.Unlock()
	v := n.cfg.Decide.DecideFlow(n.ctx, n.flow(firewall.ICMP, req.dst, 0), audit.LayerL4)
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.flows) >= maxPingFlows {
		for k, f := range p.flows {
			if now.Sub(f.last) >= pingFlowIdle {
				delete(p.flows, k)
			}
		}
	}
	if len(p.flows) < maxPingFlows {
		p.flows[key] = pingFlow{action: v.Action, last: now, policy: current}
	}
	return v.Action
}

// sendFiltered answers a denied echo as a filtering router does:
// destination unreachable, communication administratively prohibited,
// from the gateway.
func (n *Stack) sendFiltered(req *echoRequest) {
	msg := make([]byte, echoHeaderLen+len(req.original))
	e := header.ICMPv4(msg)
	e.SetType(header.ICMPv4DstUnreachable)
	e.SetCode(header.ICMPv4AdminProhibited)
	copy(msg[echoHeaderLen:], req.original)
	n.writeICMP(n.cfg.Gateway.Addr(), req.src, msg)
}

// writeICMP sends an ICMP message to the VM from the address from; the
// NIC spoofs, so from may be any address.
func (n *Stack) writeICMP(from, to netip.Addr, msg []byte) {
	header.ICMPv4(msg).SetChecksum(0)
	header.ICMPv4(msg).SetChecksum(^checksum.Checksum(msg, 0))
	r, err := n.s.FindRoute(nicID, tcpip.AddrFrom4(from.As4()), tcpip.AddrFrom4(to.As4()), ipv4.ProtocolNumber, false)
	if err != nil {
		return
	}
	defer r.Release()
	pkt := stack.NewPacketBuffer(stack.PacketBufferOptions{
		ReserveHeaderBytes: int(r.MaxHeaderLength()),
		Payload:            buffer.MakeWithData(msg),
	})
	defer pkt.DecRef()
	r.WritePacket(stack.NetworkHeaderParams{Protocol: header.ICMPv4ProtocolNumber, TTL: replyTTL, TOS: stack.DefaultTOS}, pkt)
}
