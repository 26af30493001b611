package netstack

import (
	"fmt"

	"golang.org/x/sys/unix"
	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/link/fdbased"
	"gvisor.dev/gvisor/pkg/tcpip/link/tun"
	"gvisor.dev/gvisor/pkg/tcpip/stack"
)

// OpenTAP attaches to (creating it if needed) the TAP device ifname, the
// tap:IFNAME link: the VM's side is the kernel interface of that name, in
// whatever namespace it is moved to.
func OpenTAP(ifname string, mtu uint32) (stack.LinkEndpoint, func() error, error) {
	fd, err := tun.OpenTAP(ifname)
	if err != nil {
		return nil, nil, fmt.Errorf("tap:%s: %w (needs root or CAP_NET_ADMIN)", ifname, err)
	}
	ep, err := fdbased.New(&fdbased.Options{
		FDs:               []int{fd},
		MTU:               mtu,
		EthernetHeader:    true,
		Address:           tcpip.LinkAddress(GatewayMAC()),
		RXChecksumOffload: true,
	})
	if err != nil {
		unix.Close(fd)
		return nil, nil, fmt.Errorf("tap:%s: %v", ifname, err)
	}
	return ep, func() error { return unix.Close(fd) }, nil
}
