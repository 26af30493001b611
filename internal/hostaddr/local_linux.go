package hostaddr

import (
	"net/netip"
	"syscall"
	"unsafe"
)

// localPrefixes reads the routes the kernel delivers to the host itself
// (type local or broadcast, in any table) from a netlink route dump.
func localPrefixes() ([]netip.Prefix, error) {
	var out []netip.Prefix
	for _, family := range []int{syscall.AF_INET, syscall.AF_INET6} {
		rib, err := syscall.NetlinkRIB(syscall.RTM_GETROUTE, family)
		if err != nil {
			return nil, err
		}
		msgs, err := syscall.ParseNetlinkMessage(rib)
		if err != nil {
			return nil, err
		}
		for _, m := range msgs {
			if m.Header.Type != syscall.RTM_NEWROUTE || len(m.Data) < syscall.SizeofRtMsg {
				continue
			}
			rt := (*syscall.RtMsg)(unsafe.Pointer(&m.Data[0]))
			if rt.Type != syscall.RTN_LOCAL && rt.Type != syscall.RTN_BROADCAST {
				continue
			}
			attrs, err := syscall.ParseNetlinkRouteAttr(&m)
			if err != nil {
				continue
			}
			for _, a := range attrs {
				if a.Attr.Type != syscall.RTA_DST {
					continue
				}
				if ip, ok := netip.AddrFromSlice(a.Value); ok {
					if p, err := ip.Unmap().Prefix(int(rt.Dst_len)); err == nil {
						out = append(out, p)
					}
				}
			}
		}
	}
	return out, nil
}
