package netstack

import (
	"context"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"os/exec"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"
	"github.com/miekg/dns"
	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/adapters/gonet"
	"gvisor.dev/gvisor/pkg/tcpip/header"
	"gvisor.dev/gvisor/pkg/tcpip/network/arp"
	"gvisor.dev/gvisor/pkg/tcpip/network/ipv4"
	"gvisor.dev/gvisor/pkg/tcpip/stack"
	"gvisor.dev/gvisor/pkg/tcpip/transport/tcp"
	"gvisor.dev/gvisor/pkg/tcpip/transport/udp"

	"guard/firewall"
	"guard/internal/testnet"
	"guard/rules"
)

// vmStack is a second gVisor stack playing the VM at 10.0.2.15, on the
// other end of the QEMU link.
func vmStack(t *testing.T, link *QEMUConn) *stack.Stack {
	t.Helper()
	s := stack.New(stack.Options{
		NetworkProtocols:   []stack.NetworkProtocolFactory{ipv4.NewProtocol, arp.NewProtocol},
		TransportProtocols: []stack.TransportProtocolFactory{tcp.NewProtocol, udp.NewProtocol},
	})
	ep := NewFrameEndpoint(link, 1500, net.HardwareAddr{0x02, 0, 0, 0, 0, 0x15})
	ctx, cancel := context.WithCancel(context.Background())
	go ep.Run(ctx)
	t.Cleanup(func() { cancel(); s.Close() })
	if err := s.CreateNIC(1, ep); err != nil {
		t.Fatal(err)
	}
	s.AddProtocolAddress(1, tcpip.ProtocolAddress{Protocol: ipv4.ProtocolNumber,
		AddressWithPrefix: tcpip.AddressWithPrefix{Address: tcpip.AddrFrom4([4]byte{10, 0, 2, 15}), PrefixLen: 24}}, stack.AddressProperties{})
	s.SetRouteTable([]tcpip.Route{{Destination: header.IPv4EmptySubnet, Gateway: tcpip.AddrFrom4([4]byte{10, 0, 2, 2}), NIC: 1}})
	return s
}

// qemuRig runs guard's stack on one end of a QEMU link and a VM stack on
// the other, with rules text and an optional DNS gateway with static hosts.
type qemuRig struct {
	ctx    context.Context
	vm     *stack.Stack
	link   *QEMUConn // the VM's end, for writing raw frames beside vm
	guard  *Stack
	active *firewall.Active
	snoop  *firewall.SnoopTable
}

func newQEMURig(t *testing.T, rulesText string, static map[string]string) *qemuRig {
	t.Helper()
	r := newGuardOnQEMULink(t, rulesText, static)
	r.vm = vmStack(t, r.link)
	return r
}

// newGuardOnQEMULink is guard's stack alone on a QEMU link; the test owns
// the VM's end.
func newGuardOnQEMULink(t *testing.T, rulesText string, static map[string]string) *qemuRig {
	t.Helper()
	guardSide, vmSide := socketpair(t)
	pol, err := rules.ParseString(rulesText)
	if err != nil {
		t.Fatal(err)
	}
	r := &qemuRig{active: firewall.NewActive(firewall.Compile(pol)), snoop: firewall.NewSnoopTable(firewall.SnoopOptions{})}
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	cfg := Config{Gateway: netip.MustParsePrefix("10.0.2.2/24"), Decide: &decider{active: r.active}, Names: r.snoop, Logger: quiet}
	if static != nil {
		cfg.DNS = NewDNSGateway(DNSConfig{Static: static, Snoop: r.snoop, Policy: r.active, Logger: quiet})
	}
	ep := NewFrameEndpoint(NewQEMUConn(guardSide), 1500, GatewayMAC())
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	go ep.Run(ctx)
	st, err := New(cfg, ep)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(st.Close)
	r.ctx = ctx
	r.guard = st
	r.link = NewQEMUConn(vmSide)
	return r
}

// TestQEMULinkCarriesFlows runs guard's stack on a QEMU stream link whose
// other end is a VM stack: DNS to the gateway, an allowed TCP flow, and a
// denied one, all through the length-prefixed framing.
func TestQEMULinkCarriesFlows(t *testing.T) {
	testnet.HostAddresses(t, "198.18.0.31")
	serveTCP(t, "198.18.0.31:7001", "over qemu\n")
	r := newQEMURig(t, "allow tcp svc.example.test:7001\ndefault deny\n", map[string]string{"svc.example.test": "198.18.0.31"})
	ctx, vm := r.ctx, r.vm

	dctx, dcancel := context.WithTimeout(ctx, 10*time.Second)
	defer dcancel()
	uc, err := gonet.DialUDP(vm, nil, &tcpip.FullAddress{NIC: 1, Addr: tcpip.AddrFrom4([4]byte{10, 0, 2, 2}), Port: 53}, ipv4.ProtocolNumber)
	if err != nil {
		t.Fatal(err)
	}
	q, _ := new(dns.Msg).SetQuestion("svc.example.test.", dns.TypeA).Pack()
	uc.SetDeadline(time.Now().Add(10 * time.Second))
	uc.Write(q)
	buf := make([]byte, 512)
	n, err := uc.Read(buf)
	if err != nil {
		t.Fatalf("DNS over the QEMU link: %v", err)
	}
	resp := new(dns.Msg)
	if resp.Unpack(buf[:n]) != nil || len(resp.Answer) != 1 || resp.Answer[0].(*dns.A).A.String() != "198.18.0.31" {
		t.Fatalf("DNS answer: %v", resp)
	}
	uc.Close()

	c, err := gonet.DialContextTCP(dctx, vm, tcpip.FullAddress{NIC: 1, Addr: tcpip.AddrFrom4([4]byte{198, 18, 0, 31}), Port: 7001}, ipv4.ProtocolNumber)
	if err != nil {
		t.Fatalf("allowed flow: %v", err)
	}
	got, _ := io.ReadAll(c)
	c.Close()
	if string(got) != "over qemu\n" {
		t.Fatalf("allowed flow read %q", got)
	}
	if _, err := gonet.DialContextTCP(dctx, vm, tcpip.FullAddress{NIC: 1, Addr: tcpip.AddrFrom4([4]byte{198, 18, 0, 31}), Port: 7002}, ipv4.ProtocolNumber); err == nil {
		t.Fatal("a denied flow connected")
	}
}

// TestManyFlowsLeaveNothingBehind opens 10,000 concurrent flows from the
// VM, half to an allowed destination and half denied, and checks that
// every one is answered and that no goroutine outlives its flow.
func TestManyFlowsLeaveNothingBehind(t *testing.T) {
	testnet.HostAddresses(t, "198.18.0.32")
	serveTCP(t, "198.18.0.32:7003", "")
	r := newQEMURig(t, "allow tcp 198.18.0.32:7003\ndefault deny\n", nil)
	ctx, vm := r.ctx, r.vm
	before := runtime.NumGoroutine()

	const flows = 10000
	var wg sync.WaitGroup
	var answered, connected atomic.Int32
	concurrent := flows // all at once
	if raceEnabled {
		concurrent = 1000 // the race detector caps live goroutines at 8128
	}
	sem := make(chan struct{}, concurrent)
	for i := range flows {
		port := uint16(7003)
		if i%2 == 1 {
			port = 7004 // denied
		}
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			dctx, dcancel := context.WithTimeout(ctx, 30*time.Second)
			defer dcancel()
			dst := tcpip.FullAddress{NIC: 1, Addr: tcpip.AddrFrom4([4]byte{198, 18, 0, 32}), Port: port}
			c, err := gonet.DialContextTCP(dctx, vm, dst, ipv4.ProtocolNumber)
			if err != nil && port == 7003 && dctx.Err() == nil {
				// The VM stack here reuses 4-tuples far faster than a
				// kernel would, and may meet its previous connection in
				// TIME-WAIT; a client retries, as this one does once.
				time.Sleep(1500 * time.Millisecond)
				c, err = gonet.DialContextTCP(dctx, vm, dst, ipv4.ProtocolNumber)
			}
			if dctx.Err() == nil {
				answered.Add(1)
			}
			if err == nil {
				connected.Add(1)
				io.Copy(io.Discard, c)
				c.Close()
			}
		})
	}
	wg.Wait()
	if answered.Load() != flows || connected.Load() != flows/2 {
		t.Fatalf("%d of %d answered, %d connected (want %d)", answered.Load(), flows, connected.Load(), flows/2)
	}
	deadline := time.Now().Add(20 * time.Second)
	for runtime.NumGoroutine() > before+20 && time.Now().Before(deadline) {
		time.Sleep(100 * time.Millisecond)
	}
	if n := runtime.NumGoroutine(); n > before+20 {
		t.Fatalf("%d goroutines after the flows ended, %d before", n, before)
	}
}

// TestDNSFloodIsBounded sends queries from 2,000 source ports at once: the
// gateway answers what it can, and the flows it keeps never exceed its cap.
func TestDNSFloodIsBounded(t *testing.T) {
	vm := newQEMURig(t, "default deny\n", map[string]string{"svc.example.test": "198.18.0.31"}).vm
	before := runtime.NumGoroutine()
	q, _ := new(dns.Msg).SetQuestion("svc.example.test.", dns.TypeA).Pack()
	var answered atomic.Int32
	var wg sync.WaitGroup
	for range 2000 {
		wg.Go(func() {
			uc, err := gonet.DialUDP(vm, nil, &tcpip.FullAddress{NIC: 1, Addr: tcpip.AddrFrom4([4]byte{10, 0, 2, 2}), Port: 53}, ipv4.ProtocolNumber)
			if err != nil {
				return
			}
			defer uc.Close()
			uc.SetDeadline(time.Now().Add(3 * time.Second))
			uc.Write(q)
			if _, err := uc.Read(make([]byte, 512)); err == nil {
				answered.Add(1)
			}
		})
	}
	wg.Wait()
	if a := answered.Load(); a < maxDNSFlows {
		t.Fatalf("only %d queries answered", a)
	}
	// The VM's own sockets are gone; what is left on guard's side are the
	// DNS flows still waiting out their idle time, at most the cap.
	if n := runtime.NumGoroutine(); n > before+maxDNSFlows+50 {
		t.Fatalf("%d goroutines after a 2,000-port flood (cap %d, %d before)", n, maxDNSFlows, before)
	}
}

// TestBlackHoleDoesNotStallOthers: 500 flows to an allowed destination
// that never answers are pending while a flow to a live server connects
// and completes at once.
func TestBlackHoleDoesNotStallOthers(t *testing.T) {
	testnet.HostAddresses(t, "198.18.0.33")
	serveTCP(t, "198.18.0.33:7005", "alive\n")
	// The black hole: 198.18.0.99 is routed into a namespace that drops it.
	_, hostIf := testnet.VM(t, netip.MustParsePrefix("10.81.0.2/24"), netip.MustParseAddr("10.81.0.1"))
	testnet.Run(t, "ip", "addr", "add", "10.81.0.1/24", "dev", hostIf)
	testnet.Run(t, "ip", "route", "add", "198.18.0.99/32", "via", "10.81.0.2")
	t.Cleanup(func() { exec.Command("ip", "route", "del", "198.18.0.99/32").Run() })
	if _, err := net.DialTimeout("tcp", "198.18.0.99:7000", 300*time.Millisecond); err == nil || !strings.Contains(err.Error(), "timeout") {
		t.Fatalf("the black hole answers: %v", err)
	}

	r := newQEMURig(t, "allow tcp 198.18.0.99\nallow tcp 198.18.0.33:7005\ndefault deny\n", nil)
	ctx, vm := r.ctx, r.vm
	for range 500 {
		go func() {
			c, err := gonet.DialContextTCP(ctx, vm, tcpip.FullAddress{NIC: 1, Addr: tcpip.AddrFrom4([4]byte{198, 18, 0, 99}), Port: 7000}, ipv4.ProtocolNumber)
			if err == nil {
				io.Copy(io.Discard, c)
				c.Close()
			}
		}()
	}
	time.Sleep(500 * time.Millisecond) // the black-hole dials are pending now
	start := time.Now()
	dctx, dcancel := context.WithTimeout(ctx, 5*time.Second)
	defer dcancel()
	c, err := gonet.DialContextTCP(dctx, vm, tcpip.FullAddress{NIC: 1, Addr: tcpip.AddrFrom4([4]byte{198, 18, 0, 33}), Port: 7005}, ipv4.ProtocolNumber)
	if err != nil {
		t.Fatalf("live flow behind 500 black-holed ones: %v", err)
	}
	got, _ := io.ReadAll(c)
	c.Close()
	if string(got) != "alive\n" || time.Since(start) > 3*time.Second {
		t.Fatalf("live flow: %q after %v", got, time.Since(start))
	}
}

// blackHoleVM answers every ARP request for an address other than the
// gateway's with the VM's MAC, and drops every other frame.
func blackHoleVM(link *QEMUConn) {
	vmMAC := net.HardwareAddr{0x02, 0, 0, 0, 0, 0x15}
	buf := make([]byte, maxFrame)
	for {
		n, err := link.ReadFrame(buf)
		if err != nil {
			return
		}
		p := gopacket.NewPacket(buf[:n], layers.LayerTypeEthernet, gopacket.NoCopy)
		req, ok := p.Layer(layers.LayerTypeARP).(*layers.ARP)
		if !ok || req.Operation != layers.ARPRequest {
			continue
		}
		eth := &layers.Ethernet{SrcMAC: vmMAC, DstMAC: req.SourceHwAddress, EthernetType: layers.EthernetTypeARP}
		reply := &layers.ARP{AddrType: layers.LinkTypeEthernet, Protocol: layers.EthernetTypeIPv4, HwAddressSize: 6, ProtAddressSize: 4,
			Operation: layers.ARPReply, SourceHwAddress: vmMAC, SourceProtAddress: req.DstProtAddress,
			DstHwAddress: req.SourceHwAddress, DstProtAddress: req.SourceProtAddress}
		out := gopacket.NewSerializeBuffer()
		if gopacket.SerializeLayers(out, gopacket.SerializeOptions{FixLengths: true}, eth, reply) == nil {
			link.WriteFrame(out.Bytes())
		}
	}
}

// synFrame is a TCP SYN from src:sport to dst:dport, addressed to the
// gateway's MAC as the VM's frames are.
func synFrame(t *testing.T, src, dst netip.Addr, sport, dport uint16) []byte {
	t.Helper()
	eth := &layers.Ethernet{SrcMAC: net.HardwareAddr{0x02, 0, 0, 0, 0, 0x15}, DstMAC: GatewayMAC(), EthernetType: layers.EthernetTypeIPv4}
	ip := &layers.IPv4{Version: 4, TTL: 64, Protocol: layers.IPProtocolTCP, SrcIP: src.AsSlice(), DstIP: dst.AsSlice()}
	seg := &layers.TCP{SrcPort: layers.TCPPort(sport), DstPort: layers.TCPPort(dport), SYN: true, Seq: uint32(sport) << 16, Window: 64240}
	seg.SetNetworkLayerForChecksum(ip)
	buf := gopacket.NewSerializeBuffer()
	if err := gopacket.SerializeLayers(buf, gopacket.SerializeOptions{FixLengths: true, ComputeChecksums: true}, eth, ip, seg); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// TestSYNFloodIsBounded: the VM sends 30,000 SYNs from spoofed addresses
// and never completes a handshake: it answers ARP for every address and
// swallows the SYN-ACKs, the worst case. guard holds at most maxInFlight
// half-open handshakes (gVisor retries each SYN-ACK for about a minute),
// drops the rest, and its memory stays bounded; closing the stack leaves
// nothing behind.
func TestSYNFloodIsBounded(t *testing.T) {
	testnet.HostAddresses(t, "198.18.0.34")
	serveTCP(t, "198.18.0.34:7006", "alive\n")
	r := newGuardOnQEMULink(t, "allow tcp 198.18.0.34:7006\ndefault deny\n", nil)
	go blackHoleVM(r.link)
	runtime.GC()
	var before runtime.MemStats
	runtime.ReadMemStats(&before)
	goroutines := runtime.NumGoroutine()

	dst := netip.MustParseAddr("198.18.0.34")
	const syns = 30000
	for i := range syns {
		src := netip.AddrFrom4([4]byte{10, 0, 2, byte(100 + i%150)})
		if err := r.link.WriteFrame(synFrame(t, src, dst, uint16(1024+i/150), 7006)); err != nil {
			t.Fatal(err)
		}
	}
	// Let the stack take in what it will, however slow the machine: until
	// the count of SYNs dropped at the cap stops moving.
	for prev, deadline := uint64(0), time.Now().Add(30*time.Second); time.Now().Before(deadline); time.Sleep(500 * time.Millisecond) {
		cur := r.guard.s.Stats().TCP.ForwardMaxInFlightDrop.Value()
		if cur > 0 && cur == prev {
			break
		}
		prev = cur
	}
	held := runtime.NumGoroutine() - goroutines
	runtime.GC()
	var after runtime.MemStats
	runtime.ReadMemStats(&after)
	grew := int64(after.HeapInuse) - int64(before.HeapInuse)
	dropped := r.guard.s.Stats().TCP.ForwardMaxInFlightDrop.Value()
	t.Logf("%d SYNs: %d goroutines held, %d dropped at the in-flight cap, heap +%d MiB", syns, held, dropped, grew>>20)
	if held > maxInFlight+100 {
		t.Errorf("%d goroutines held by half-open handshakes (cap %d)", held, maxInFlight)
	}
	if dropped < syns/2 {
		t.Errorf("only %d SYNs dropped past the cap", dropped)
	}
	if grew > 256<<20 {
		t.Errorf("heap grew by %d MiB", grew>>20)
	}
	r.guard.Close()
	deadline := time.Now().Add(20 * time.Second)
	for runtime.NumGoroutine() > goroutines+20 && time.Now().Before(deadline) {
		time.Sleep(100 * time.Millisecond)
	}
	if n := runtime.NumGoroutine(); n > goroutines+20 {
		t.Fatalf("%d goroutines after closing the stack, %d before the flood", n, goroutines)
	}
}
