package hostaddr

import (
	"errors"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"testing"
)

func TestContains(t *testing.T) {
	fail := false
	s := &Set{Local: func() ([]netip.Prefix, error) { return nil, nil }, List: func() ([]net.Addr, error) {
		if fail {
			return nil, errors.New("netlink busy")
		}
		return []net.Addr{
			&net.IPNet{IP: net.ParseIP("192.168.1.5").To4(), Mask: net.CIDRMask(24, 32)},
			&net.IPNet{IP: net.ParseIP("fe80::1"), Mask: net.CIDRMask(64, 128)},
		}, nil
	}}
	for _, tc := range []struct {
		addr string
		want bool
	}{
		{"192.168.1.5", true},
		{"::ffff:192.168.1.5", true},
		{"fe80::1%eth0", true},
		{"192.168.1.6", false},
		{"8.8.8.8", false},
	} {
		if got := s.Contains(netip.MustParseAddr(tc.addr)); got != tc.want {
			t.Errorf("%s: got %v", tc.addr, got)
		}
	}
	// A failed re-read keeps what was known.
	fail = true
	s.at = s.at.Add(-refresh * 2)
	if !s.Contains(netip.MustParseAddr("192.168.1.5")) {
		t.Error("a failed refresh forgot the host's address")
	}
}

func TestRealInterfaces(t *testing.T) {
	var s Set
	if !s.Contains(netip.MustParseAddr("127.0.0.1")) {
		t.Error("127.0.0.1 is not among this host's addresses")
	}
}

// TestLocalPrefix: an address on lo with a /24 makes the whole /24 the
// host's, and every address in it counts.
func TestLocalPrefix(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("needs root to add an address, as the sessions and CI have")
	}
	exec.Command("ip", "addr", "del", "198.18.7.1/24", "dev", "lo").Run()
	if out, err := exec.Command("ip", "addr", "add", "198.18.7.1/24", "dev", "lo").CombinedOutput(); err != nil {
		t.Fatalf("%v %s", err, out)
	}
	defer exec.Command("ip", "addr", "del", "198.18.7.1/24", "dev", "lo").Run()
	var s Set
	for addr, want := range map[string]bool{"198.18.7.1": true, "198.18.7.77": true, "198.18.7.255": true, "198.18.8.1": false} {
		if got := s.Contains(netip.MustParseAddr(addr)); got != want {
			t.Errorf("%s: %v, want %v", addr, got, want)
		}
	}
}
