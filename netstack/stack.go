package netstack

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"sync"
	"time"

	"github.com/miekg/dns"
	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/adapters/gonet"
	"gvisor.dev/gvisor/pkg/tcpip/header"
	"gvisor.dev/gvisor/pkg/tcpip/network/arp"
	"gvisor.dev/gvisor/pkg/tcpip/network/ipv4"
	"gvisor.dev/gvisor/pkg/tcpip/stack"
	"gvisor.dev/gvisor/pkg/tcpip/transport/icmp"
	"gvisor.dev/gvisor/pkg/tcpip/transport/tcp"
	"gvisor.dev/gvisor/pkg/tcpip/transport/udp"
	"gvisor.dev/gvisor/pkg/waiter"

	"guard/audit"
	"guard/firewall"
	"guard/internal/hostaddr"
	"guard/internal/relay"
)

// Decider decides a new flow and records it; the daemon's DecideFlow.
type Decider interface {
	DecideFlow(ctx context.Context, f firewall.Flow, layer string) firewall.Verdict
}

// Transparent takes diverted port-80/443 connections; *proxy.Proxy.
// ServeSpliced is for port 443 with interception off: the server name is
// still decided, and the connection is spliced undecrypted.
type Transparent interface {
	ServeTransparent(ctx context.Context, conn net.Conn, originalDst netip.AddrPort)
	ServeSpliced(ctx context.Context, conn net.Conn, originalDst netip.AddrPort)
}

// Names gives and holds the snooped names of an address;
// *firewall.SnoopTable.
type Names interface {
	Names(ip netip.Addr) []string
	Hold(ip netip.Addr) (release func())
}

// HostAddrs tells the host's own addresses; *hostaddr.Set satisfies it.
type HostAddrs interface {
	Contains(a netip.Addr) bool
}

// Config assembles a Stack.
type Config struct {
	// Gateway is the gateway's address and the VM's subnet, e.g.
	// 10.0.2.1/24.
	Gateway netip.Prefix
	Decide  Decider
	Names   Names
	Proxy   Transparent
	DNS     *DNSGateway
	// Intercept diverts ports 80 and 443 into the proxy
	// (transparentInterception).
	Intercept bool
	// LocalInference is the host's model server (the profile's
	// localInference, when its host is an address). The VM reaches it at
	// the gateway address on the same port; it is the one way to the
	// host's loopback, and the policy's exemption decides it.
	LocalInference netip.AddrPort
	// LocalInferenceName is the profile's host name for it, when it gave a
	// name rather than an address: the exemption names that host.
	LocalInferenceName string
	// Policy is the policy in force; after each change the open flows are
	// decided again and those it denies are cut (nil: they never are).
	Policy Watched
	// Events records the cuts; nil records nothing.
	Events Recorder
	// Pinger pings allowed destinations for the VM; nil leaves the VM's
	// pings unanswered (never answered falsely).
	Pinger Pinger
	// HostAddrs are the host's own addresses: a flow to one of them is
	// allowed only by a rule that names it. The interfaces' when nil.
	HostAddrs HostAddrs
	Logger    *slog.Logger
}

// Limits of the forwarders.
const (
	// maxInFlight bounds TCP handshakes being decided at once. It is large
	// so that a black-holed destination cannot starve the others
	// (gvisor-tap-vsock's 10 did, issue #676): the dial happens after the
	// handshake, in its own goroutine, with its own timeout.
	maxInFlight = 4096
	flowDial    = 10 * time.Second
	udpIdle     = 60 * time.Second
	// dnsIdle and maxDNSFlows bound what a query flood can hold: each VM
	// source port is a flow with a goroutine until it has been quiet this
	// long, and past the cap new flows are dropped (resolvers retry).
	dnsIdle       = 10 * time.Second
	maxDNSFlows   = 256
	maxUDPPayload = 65535
)

// Stack is the VM's network: a gVisor TCP/IP stack on one link endpoint
// that answers as the gateway for every address, and decides each flow.
type Stack struct {
	cfg      Config
	dnsFlows chan struct{} // a slot per live DNS flow
	pings    *pings
	open     openFlows
	mtu      uint32 // the link's, offered to the VM by DHCP
	s        *stack.Stack
	ctx      context.Context
	cancel   context.CancelFunc
	wg       sync.WaitGroup
}

const nicID = 1

// New builds the stack on ep and starts forwarding.
func New(cfg Config, ep stack.LinkEndpoint) (*Stack, error) {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.HostAddrs == nil {
		cfg.HostAddrs = &hostaddr.Set{}
	}
	if !cfg.Gateway.Addr().Is4() {
		return nil, errors.New("netstack: the gateway must be IPv4 (IPv6 is refused: see doc.go)")
	}
	s := stack.New(stack.Options{
		NetworkProtocols:   []stack.NetworkProtocolFactory{ipv4.NewProtocol, arp.NewProtocol},
		TransportProtocols: []stack.TransportProtocolFactory{tcp.NewProtocol, udp.NewProtocol, icmp.NewProtocol4},
		HandleLocal:        false,
	})
	// TCP tuning, after tailscale's netstack: SACK on; RACK off (its loss
	// recovery is slow in gVisor); Reno, since cubic's window can overflow
	// (gVisor #11632); receive buffers up to 8 MiB with moderation, send
	// buffers up to 6 MiB.
	sack := tcpip.TCPSACKEnabled(true)
	s.SetTransportProtocolOption(tcp.ProtocolNumber, &sack)
	recovery := tcpip.TCPRecovery(0)
	s.SetTransportProtocolOption(tcp.ProtocolNumber, &recovery)
	reno := tcpip.CongestionControlOption("reno")
	s.SetTransportProtocolOption(tcp.ProtocolNumber, &reno)
	rcv := tcpip.TCPReceiveBufferSizeRangeOption{Min: 4 << 10, Default: 1 << 20, Max: 8 << 20}
	s.SetTransportProtocolOption(tcp.ProtocolNumber, &rcv)
	snd := tcpip.TCPSendBufferSizeRangeOption{Min: 4 << 10, Default: 1 << 20, Max: 6 << 20}
	s.SetTransportProtocolOption(tcp.ProtocolNumber, &snd)
	moderate := tcpip.TCPModerateReceiveBufferOption(true)
	s.SetTransportProtocolOption(tcp.ProtocolNumber, &moderate)
	// The stack closes first whenever the far server does, so it holds
	// TIME-WAIT for flows the VM will reuse the 4-tuple of; a short wait
	// keeps a busy VM's new connection from meeting an old one.
	timeWait := tcpip.TCPTimeWaitTimeoutOption(time.Second)
	s.SetTransportProtocolOption(tcp.ProtocolNumber, &timeWait)
	ctx, cancel := context.WithCancel(context.Background())
	n := &Stack{cfg: cfg, s: s, ctx: ctx, cancel: cancel, dnsFlows: make(chan struct{}, maxDNSFlows), pings: newPings(), mtu: ep.MTU()}
	// Handlers go in before the NIC: attaching the link starts delivery.
	s.SetTransportProtocolHandler(tcp.ProtocolNumber, tcp.NewForwarder(s, 0, maxInFlight, n.handleTCP).HandlePacket)
	s.SetTransportProtocolHandler(udp.ProtocolNumber, udp.NewForwarder(s, n.handleUDP).HandlePacket)
	s.SetTransportProtocolHandler(icmp.ProtocolNumber4, n.handleICMP)
	if err := s.CreateNIC(nicID, ep); err != nil {
		cancel()
		return nil, fmt.Errorf("netstack: NIC: %v", err)
	}
	gw := tcpip.AddrFrom4(cfg.Gateway.Addr().As4())
	if err := s.AddProtocolAddress(nicID, tcpip.ProtocolAddress{
		Protocol:          ipv4.ProtocolNumber,
		AddressWithPrefix: tcpip.AddressWithPrefix{Address: gw, PrefixLen: cfg.Gateway.Bits()},
	}, stack.AddressProperties{}); err != nil {
		return nil, fmt.Errorf("netstack: address: %v", err)
	}
	// Accept packets for every destination and answer from it: the stack
	// is the VM's whole internet.
	s.SetPromiscuousMode(nicID, true)
	s.SetSpoofing(nicID, true)
	s.SetRouteTable([]tcpip.Route{{Destination: header.IPv4EmptySubnet, NIC: nicID}})
	if err := n.serveDHCP(); err != nil {
		n.Close()
		return nil, err
	}
	if cfg.Policy != nil {
		n.wg.Go(n.watchPolicy)
	}
	return n, nil
}

// Close stops the stack and waits for its flows.
func (n *Stack) Close() {
	n.cancel()
	n.s.Close()
	n.wg.Wait()
}

func addrOfTCPIP(a tcpip.Address) netip.Addr {
	ip, _ := netip.AddrFromSlice(a.AsSlice())
	return ip.Unmap()
}

// handleTCP decides a new TCP flow before completing the VM's handshake:
// a deny is a RST.
func (n *Stack) handleTCP(r *tcp.ForwarderRequest) {
	id := r.ID()
	dst := addrOfTCPIP(id.LocalAddress)
	port := id.LocalPort
	if dst == n.cfg.Gateway.Addr() && n.cfg.LocalInference.IsValid() && port == n.cfg.LocalInference.Port() {
		n.localInference(r)
		return
	}
	if dst == n.cfg.Gateway.Addr() {
		// The gateway is not a host: only its DNS service answers.
		if port != 53 || n.cfg.DNS == nil {
			r.Complete(true)
			return
		}
		if conn, ok := accept(r); ok {
			n.wg.Go(func() { n.serveDNSOverTCP(conn) })
		}
		return
	}
	f := n.flow(firewall.TCP, dst, port)
	v := n.cfg.Decide.DecideFlow(n.ctx, f, audit.LayerL4)
	if v.Action == firewall.Deny {
		r.Complete(true)
		return
	}
	conn, ok := accept(r)
	if !ok {
		return
	}
	original := netip.AddrPortFrom(dst, port)
	intercept := v.Action == firewall.Intercept || (n.cfg.Intercept && (port == 80 || port == 443))
	// With interception off, 443 still goes through the proxy, which
	// decides the server name before it splices.
	spliceTLS := !intercept && port == 443 && n.cfg.Proxy != nil
	// The flow lives until its connection is closed, by whoever holds it
	// last (the proxy returns as soon as it has taken the connection): its
	// names are held in the snoop table and a policy change can cut it.
	release := n.cfg.Names.Hold(dst)
	tc := &trackedConn{TCPConn: conn}
	conns := &connSet{conns: []io.Closer{tc}}
	of := &openFlow{flow: f, viaProxy: intercept, cut: conns.closeAll}
	tc.flow = of
	tc.done = func() { n.open.remove(of); release() }
	n.track(of)
	n.wg.Go(func() {
		switch {
		case intercept:
			n.cfg.Proxy.ServeTransparent(n.ctx, tc, original)
		case spliceTLS:
			n.cfg.Proxy.ServeSpliced(n.ctx, tc, original)
		default:
			n.splice(tc, original, conns)
		}
	})
}

// flow describes a new flow from the VM for the firewall.
func (n *Stack) flow(proto firewall.Proto, dst netip.Addr, port uint16) firewall.Flow {
	return firewall.Flow{Proto: proto, IP: dst, Names: n.cfg.Names.Names(dst), Port: port, HostLocal: n.cfg.HostAddrs.Contains(dst)}
}

// trackedConn is a VM connection that tells its flow when it is closed.
type trackedConn struct {
	*gonet.TCPConn
	flow *openFlow
	once sync.Once
	done func()
}

// SetServerName records the TLS server name the proxy read on the
// connection, so that a policy change decides the flow by it too.
func (c *trackedConn) SetServerName(name string) { c.flow.serverName.Store(&name) }

func (c *trackedConn) Close() error {
	err := c.TCPConn.Close()
	c.once.Do(c.done)
	return err
}

// localInference carries a flow to the gateway's local-inference port to
// the host's model server, decided as a flow to that address.
func (n *Stack) localInference(r *tcp.ForwarderRequest) {
	li := n.cfg.LocalInference
	f := firewall.Flow{Proto: firewall.TCP, IP: li.Addr(), Port: li.Port()}
	if n.cfg.LocalInferenceName != "" {
		f.Names = []string{n.cfg.LocalInferenceName}
	}
	if v := n.cfg.Decide.DecideFlow(n.ctx, f, audit.LayerL4); v.Action == firewall.Deny {
		r.Complete(true)
		return
	}
	conn, ok := accept(r)
	if !ok {
		return
	}
	n.wg.Go(func() {
		defer conn.Close()
		ctx, cancel := context.WithTimeout(n.ctx, flowDial)
		up, err := (&net.Dialer{}).DialContext(ctx, "tcp", li.String())
		cancel()
		if err != nil {
			return
		}
		defer up.Close()
		relay.Both(conn, up)
	})
}

// accept completes the VM's handshake; a failure is a RST.
func accept(r *tcp.ForwarderRequest) (*gonet.TCPConn, bool) {
	var wq waiter.Queue
	ep, err := r.CreateEndpoint(&wq)
	if err != nil {
		r.Complete(true)
		return nil, false
	}
	r.Complete(false)
	return gonet.NewTCPConn(&wq, ep), true
}

// splice dials an allowed destination directly and relays; conns is the
// flow's set, which a policy change may cut.
func (n *Stack) splice(vm net.Conn, dst netip.AddrPort, conns *connSet) {
	defer vm.Close()
	if !dialable(dst.Addr()) {
		return
	}
	ctx, cancel := context.WithTimeout(n.ctx, flowDial)
	up, err := (&net.Dialer{}).DialContext(ctx, "tcp", dst.String())
	cancel()
	if err != nil || !conns.add(up) {
		return
	}
	defer up.Close()
	relay.Both(vm, up)
}

// dialable refuses destinations that would land on the host itself.
func dialable(a netip.Addr) bool {
	return !(a.IsLoopback() || a.IsUnspecified() || a.IsMulticast() || a == netip.AddrFrom4([4]byte{255, 255, 255, 255}))
}

// handleUDP serves the gateway's DNS and relays allowed datagram flows.
func (n *Stack) handleUDP(r *udp.ForwarderRequest) bool {
	id := r.ID()
	dst := addrOfTCPIP(id.LocalAddress)
	port := id.LocalPort
	if dst == n.cfg.Gateway.Addr() {
		if port != 53 || n.cfg.DNS == nil {
			return false // the stack answers ICMP port unreachable
		}
		select {
		case n.dnsFlows <- struct{}{}:
		default:
			return true // flood: dropped, as a busy resolver would
		}
		if !n.serveUDP(r, n.dnsReply, dnsIdle, func() { <-n.dnsFlows }) {
			<-n.dnsFlows
			return false
		}
		return true
	}
	f := n.flow(firewall.UDP, dst, port)
	// QUIC (UDP 443) is refused by the policy's built-in last rule unless
	// the user's rules allow it first; see daemon.
	if v := n.cfg.Decide.DecideFlow(n.ctx, f, audit.LayerL4); v.Action == firewall.Deny || !dialable(dst) {
		return false
	}
	up, err := net.Dial("udp", netip.AddrPortFrom(dst, port).String())
	if err != nil {
		return false
	}
	return n.relayUDP(r, f, up)
}

// dnsReply answers one DNS message from the VM.
func (n *Stack) dnsReply(q []byte) []byte {
	req := new(dns.Msg)
	if err := req.Unpack(q); err != nil {
		return nil
	}
	resp := n.cfg.DNS.Answer(n.ctx, req)
	// Over UDP an answer must fit what the VM offered.
	size := dns.MinMsgSize
	if o := req.IsEdns0(); o != nil {
		size = int(o.UDPSize())
	}
	resp.Truncate(size)
	out, err := resp.Pack()
	if err != nil {
		return nil
	}
	return out
}

// serveDNSOverTCP answers length-prefixed DNS messages on one connection.
func (n *Stack) serveDNSOverTCP(c net.Conn) {
	defer c.Close()
	dc := &dns.Conn{Conn: c}
	for {
		c.SetReadDeadline(time.Now().Add(udpIdle))
		req, err := dc.ReadMsg()
		if err != nil {
			return
		}
		if err := dc.WriteMsg(n.cfg.DNS.Answer(n.ctx, req)); err != nil {
			return
		}
	}
}

// serveUDP answers each datagram of a VM flow with reply, until the flow
// has been idle for idle; done runs when it ends.
func (n *Stack) serveUDP(r *udp.ForwarderRequest, reply func([]byte) []byte, idle time.Duration, done func()) bool {
	var wq waiter.Queue
	ep, err := r.CreateEndpoint(&wq)
	if err != nil {
		return false
	}
	conn := gonet.NewUDPConn(&wq, ep)
	n.wg.Go(func() {
		defer done()
		defer conn.Close()
		buf := make([]byte, maxUDPPayload)
		for {
			conn.SetReadDeadline(time.Now().Add(idle))
			k, err := conn.Read(buf)
			if err != nil {
				return
			}
			if out := reply(buf[:k]); out != nil {
				conn.Write(out)
			}
		}
	})
	return true
}

// relayUDP is the per-flow NAT: one host socket for one VM flow, closed
// after it has been idle.
func (n *Stack) relayUDP(r *udp.ForwarderRequest, f firewall.Flow, up net.Conn) bool {
	var wq waiter.Queue
	ep, err := r.CreateEndpoint(&wq)
	if err != nil {
		up.Close()
		return false
	}
	vm := gonet.NewUDPConn(&wq, ep)
	conns := &connSet{conns: []io.Closer{vm, up}}
	of := &openFlow{flow: f, cut: conns.closeAll}
	n.track(of)
	n.wg.Go(func() {
		defer n.open.remove(of)
		defer vm.Close()
		defer up.Close()
		var last sync.Mutex
		touched := time.Now()
		touch := func() { last.Lock(); touched = time.Now(); last.Unlock() }
		idle := func() bool { last.Lock(); defer last.Unlock(); return time.Since(touched) > udpIdle }
		go func() {
			buf := make([]byte, maxUDPPayload)
			for {
				up.SetReadDeadline(time.Now().Add(udpIdle))
				k, err := up.Read(buf)
				if err != nil {
					if ne, ok := err.(net.Error); ok && ne.Timeout() && !idle() {
						continue
					}
					vm.Close()
					return
				}
				touch()
				vm.Write(buf[:k])
			}
		}()
		buf := make([]byte, maxUDPPayload)
		for {
			vm.SetReadDeadline(time.Now().Add(udpIdle))
			k, err := vm.Read(buf)
			if err != nil {
				if ne, ok := err.(net.Error); ok && ne.Timeout() && !idle() {
					continue
				}
				return
			}
			touch()
			up.Write(buf[:k])
		}
	})
	return true
}
