package netstack

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strings"

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
//
// The raw socket reads copies: the host's kernel still sees every frame on
// the interface. So the interface is made deaf first (see isolateLink),
// and guardd --netns goes further and keeps it in a namespace of its own
// (OpenAFPacketIn).
func OpenAFPacket(ifname string, mtu uint32) (stack.LinkEndpoint, func() error, error) {
	if err := isolateLink(ifname); err != nil {
		return nil, nil, err
	}
	return openAFPacket(ifname, mtu)
}

// OpenAFPacketIn is OpenAFPacket for an interface inside the network
// namespace at nsPath (e.g. /run/netns/NAME): the socket is made there, so
// frames from the VM reach no host stack but guard's.
func OpenAFPacketIn(nsPath, ifname string, mtu uint32) (ep stack.LinkEndpoint, closeFn func() error, err error) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	home, err := os.Open("/proc/thread-self/ns/net")
	if err != nil {
		return nil, nil, fmt.Errorf("afpacket:%s: %w", ifname, err)
	}
	defer home.Close()
	target, err := os.Open(nsPath)
	if err != nil {
		return nil, nil, fmt.Errorf("afpacket:%s: namespace: %w", ifname, err)
	}
	defer target.Close()
	if err := unix.Setns(int(target.Fd()), unix.CLONE_NEWNET); err != nil {
		return nil, nil, fmt.Errorf("afpacket:%s: enter namespace %s: %w", ifname, nsPath, err)
	}
	defer func() {
		if serr := unix.Setns(int(home.Fd()), unix.CLONE_NEWNET); serr != nil {
			// This thread cannot go home; never hand it back to the runtime.
			runtime.LockOSThread()
			if err == nil {
				closeFn()
				ep, closeFn, err = nil, nil, fmt.Errorf("afpacket:%s: leave namespace: %w", ifname, serr)
			}
		}
	}()
	return openAFPacket(ifname, mtu)
}

// isolateLink makes the host's kernel ignore the VM on ifname: no IPv6 on
// it (else the VM reaches host services at the link-local address), no
// ARP answers for the host's addresses (so the VM cannot learn a MAC to
// send IPv4 to), and strict reverse-path filtering (which drops what comes
// in with an address the host would not route back out of it).
func isolateLink(ifname string) error {
	for _, s := range []struct{ path, value string }{
		{"ipv6/conf/" + ifname + "/disable_ipv6", "1"},
		{"ipv4/conf/" + ifname + "/arp_ignore", "8"},
		{"ipv4/conf/" + ifname + "/rp_filter", "1"},
		{"ipv4/conf/" + ifname + "/accept_local", "0"},
	} {
		p := filepath.Join("/proc/sys/net", s.path)
		if _, err := os.Stat(p); os.IsNotExist(err) && strings.HasPrefix(s.path, "ipv6/") {
			continue // no IPv6 in this kernel: nothing to turn off
		}
		if err := os.WriteFile(p, []byte(s.value), 0); err != nil {
			return fmt.Errorf("afpacket:%s: isolating the host end from the VM: %w (needs root)", ifname, err)
		}
	}
	return nil
}

func openAFPacket(ifname string, mtu uint32) (stack.LinkEndpoint, func() error, error) {
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
