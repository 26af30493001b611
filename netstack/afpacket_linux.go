package netstack

import (
	"fmt"
	"net"

	"golang.org/x/sys/unix"
	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/link/fdbased"
	"gvisor.dev/gvisor/pkg/tcpip/stack"
)

// OpenAFPacket attaches to ifname (the host end of a veth pair) with a raw
// packet socket, the afpacket:IFNAME link. Checksums of frames from the VM
// are not verified: a veth carries partial checksums, and the frames never
// leave the machine.
func OpenAFPacket(ifname string, mtu uint32) (stack.LinkEndpoint, func() error, error) {
	iface, err := net.InterfaceByName(ifname)
	if err != nil {
		return nil, nil, fmt.Errorf("afpacket:%s: %w", ifname, err)
	}
	proto := htons(unix.ETH_P_ALL)
	fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW|unix.SOCK_CLOEXEC, int(proto))
	if err != nil {
		return nil, nil, fmt.Errorf("afpacket:%s: socket: %w (needs root or CAP_NET_RAW)", ifname, err)
	}
	if err := unix.Bind(fd, &unix.SockaddrLinklayer{Protocol: proto, Ifindex: iface.Index}); err != nil {
		unix.Close(fd)
		return nil, nil, fmt.Errorf("afpacket:%s: bind: %w", ifname, err)
	}
	// Frames for the gateway's MAC are "other host" to the kernel; the
	// socket sees them in promiscuous mode.
	mreq := unix.PacketMreq{Ifindex: int32(iface.Index), Type: unix.PACKET_MR_PROMISC}
	if err := unix.SetsockoptPacketMreq(fd, unix.SOL_PACKET, unix.PACKET_ADD_MEMBERSHIP, &mreq); err != nil {
		unix.Close(fd)
		return nil, nil, fmt.Errorf("afpacket:%s: promiscuous: %w", ifname, err)
	}
	unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, 4<<20)
	unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_SNDBUFFORCE, 4<<20)
	ep, err := fdbased.New(&fdbased.Options{
		FDs:                []int{fd},
		MTU:                mtu,
		EthernetHeader:     true,
		Address:            tcpip.LinkAddress(GatewayMAC()),
		RXChecksumOffload:  true,
		PacketDispatchMode: fdbased.RecvMMsg,
	})
	if err != nil {
		unix.Close(fd)
		return nil, nil, fmt.Errorf("afpacket:%s: %v", ifname, err)
	}
	return ep, func() error { return unix.Close(fd) }, nil
}

func htons(v uint16) uint16 { return v<<8 | v>>8 }
