package netstack

import (
	"encoding/binary"
	"net"
	"net/netip"
	"time"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"
	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/adapters/gonet"
	"gvisor.dev/gvisor/pkg/tcpip/network/ipv4"
	"gvisor.dev/gvisor/pkg/tcpip/transport/udp"
	"gvisor.dev/gvisor/pkg/waiter"
)

// dhcpLease is how long the VM's one address is leased.
const dhcpLease = 24 * time.Hour

// VMAddress is the address the gateway's DHCP server gives the VM: the
// next after the gateway's in the QEMU layout (.15 for a .2 gateway).
func VMAddress(gateway netip.Prefix) netip.Addr {
	b := gateway.Addr().As4()
	b[3] = 15
	return netip.AddrFrom4(b)
}

// serveDHCP answers DHCP on the gateway: one VM, one address, the gateway
// as router and DNS server. It binds port 67 in the stack, so the UDP
// forwarder never sees DHCP.
func (n *Stack) serveDHCP() error {
	var wq waiter.Queue
	ep, err := n.s.NewEndpoint(udp.ProtocolNumber, ipv4.ProtocolNumber, &wq)
	if err != nil {
		return errString(err.String())
	}
	ep.SocketOptions().SetBroadcast(true)
	if err := ep.Bind(tcpip.FullAddress{NIC: nicID, Port: 67}); err != nil {
		ep.Close()
		return errString(err.String())
	}
	conn := gonet.NewUDPConn(&wq, ep)
	n.wg.Go(func() {
		<-n.ctx.Done()
		conn.Close()
	})
	n.wg.Go(func() {
		buf := make([]byte, 1500)
		for {
			k, _, err := conn.ReadFrom(buf)
			if err != nil {
				return
			}
			reply := n.dhcpReply(buf[:k])
			if reply == nil {
				continue
			}
			// The client has no address yet: answer to the broadcast.
			conn.WriteTo(reply, &net.UDPAddr{IP: net.IPv4bcast, Port: 68})
		}
	})
	return nil
}

type errString string

func (e errString) Error() string { return "netstack: " + string(e) }

// dhcpReply answers a DISCOVER with an OFFER and a REQUEST for the VM's
// address with an ACK (anything else with a NAK); other messages get none.
func (n *Stack) dhcpReply(b []byte) []byte {
	pkt := gopacket.NewPacket(b, layers.LayerTypeDHCPv4, gopacket.Default)
	req, ok := pkt.Layer(layers.LayerTypeDHCPv4).(*layers.DHCPv4)
	if !ok || req.Operation != layers.DHCPOpRequest {
		return nil
	}
	var msgType layers.DHCPMsgType
	var requested net.IP
	for _, o := range req.Options {
		switch o.Type {
		case layers.DHCPOptMessageType:
			if len(o.Data) == 1 {
				msgType = layers.DHCPMsgType(o.Data[0])
			}
		case layers.DHCPOptRequestIP:
			requested = net.IP(o.Data)
		}
	}
	gw := n.cfg.Gateway.Addr().AsSlice()
	vm := VMAddress(n.cfg.Gateway)
	var replyType layers.DHCPMsgType
	switch msgType {
	case layers.DHCPMsgTypeDiscover:
		replyType = layers.DHCPMsgTypeOffer
	case layers.DHCPMsgTypeRequest:
		replyType = layers.DHCPMsgTypeAck
		ask := requested
		if ask == nil {
			ask = req.ClientIP
		}
		if ask != nil && !ask.Equal(net.IP(vm.AsSlice())) && !ask.IsUnspecified() {
			replyType = layers.DHCPMsgTypeNak
		}
	default:
		return nil
	}
	mask := net.CIDRMask(n.cfg.Gateway.Bits(), 32)
	lease := make([]byte, 4)
	binary.BigEndian.PutUint32(lease, uint32(dhcpLease/time.Second))
	reply := &layers.DHCPv4{
		Operation:    layers.DHCPOpReply,
		HardwareType: req.HardwareType,
		HardwareLen:  req.HardwareLen,
		Xid:          req.Xid,
		Flags:        req.Flags,
		RelayAgentIP: req.RelayAgentIP,
		ClientHWAddr: req.ClientHWAddr,
		Options: layers.DHCPOptions{
			layers.NewDHCPOption(layers.DHCPOptMessageType, []byte{byte(replyType)}),
			layers.NewDHCPOption(layers.DHCPOptServerID, gw),
		},
	}
	if replyType != layers.DHCPMsgTypeNak {
		reply.YourClientIP = vm.AsSlice()
		reply.NextServerIP = gw
		reply.Options = append(reply.Options,
			layers.NewDHCPOption(layers.DHCPOptLeaseTime, lease),
			layers.NewDHCPOption(layers.DHCPOptSubnetMask, mask),
			layers.NewDHCPOption(layers.DHCPOptRouter, gw),
			layers.NewDHCPOption(layers.DHCPOptDNS, gw),
			// The link's MTU, so that a VM on a jumbo link uses it.
			layers.NewDHCPOption(layers.DHCPOptInterfaceMTU, binary.BigEndian.AppendUint16(nil, uint16(min(n.mtu, 65535)))),
		)
	}
	reply.Options = append(reply.Options, layers.NewDHCPOption(layers.DHCPOptEnd, nil))
	out := gopacket.NewSerializeBuffer()
	if err := reply.SerializeTo(out, gopacket.SerializeOptions{FixLengths: true}); err != nil {
		return nil
	}
	return out.Bytes()
}
