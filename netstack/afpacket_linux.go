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
// leave the machine. An mtu of 0 takes the interface's own, so a veth set
// to a jumbo MTU gives a jumbo link.
func OpenAFPacket(ifname string, mtu uint32) (stack.LinkEndpoint, func() error, error) {
	iface, err := net.InterfaceByName(ifname)
	if err != nil {
		return nil, nil, fmt.Errorf("afpacket:%s: %w", ifname, err)
	}
	if mtu == 0 {
		mtu = uint32(iface.MTU)
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
	// With a virtio-net header on each frame the stack hands the kernel
	// TCP segments of up to 64 KiB and the kernel cuts them (or passes
	// them whole across the veth, as its own TCP does): without it every
	// 1500-byte frame toward the VM is a system call.
	gso := uint32(0)
	if unix.SetsockoptInt(fd, unix.SOL_PACKET, unix.PACKET_VNET_HDR, 1) == nil {
		gso = gsoMaxSize
	}
	unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, 4<<20)
	unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_SNDBUFFORCE, 4<<20)
	ep, err := fdbased.New(&fdbased.Options{
		FDs:                []int{fd},
		MTU:                mtu,
		EthernetHeader:     true,
		Address:            tcpip.LinkAddress(GatewayMAC()),
		RXChecksumOffload:  true,
		GSOMaxSize:         gso,
		PacketDispatchMode: fdbased.RecvMMsg,
	})
	if err != nil {
		unix.Close(fd)
		return nil, nil, fmt.Errorf("afpacket:%s: %v", ifname, err)
	}
	return ep, func() error { return unix.Close(fd) }, nil
}

// gsoMaxSize is the largest segment the stack gives the kernel to cut.
const gsoMaxSize = 65536

func htons(v uint16) uint16 { return v<<8 | v>>8 }
