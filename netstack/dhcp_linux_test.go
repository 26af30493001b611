package netstack

import (
	"io"
	"log/slog"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"guard/firewall"
	"guard/internal/testnet"
	"guard/rules"
)

// TestDHCPWithARealClient: dhclient in a namespace gets the VM's address,
// the route, the DNS server and the link's jumbo MTU from the gateway.
func TestDHCPWithARealClient(t *testing.T) {
	if _, err := exec.LookPath("dhclient"); err != nil {
		t.Fatal("dhclient is needed: .ci/run installs isc-dhcp-client")
	}
	ns, hostIf, vmIf := testnet.BareVM(t)
	// The host end is jumbo, the VM's end starts at 1500: DHCP tells it.
	testnet.Run(t, "ip", "link", "set", hostIf, "mtu", "9000")
	ep, closeEP, err := OpenAFPacket(hostIf, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer closeEP()
	pol, _ := rules.ParseString("default deny\n")
	active := firewall.NewActive(firewall.Compile(pol))
	st, err := New(Config{Gateway: netip.MustParsePrefix("10.0.2.2/24"), Decide: &decider{active: active},
		Names: firewall.NewSnoopTable(firewall.SnoopOptions{}), Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}, ep)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	dir := t.TempDir()
	pid := filepath.Join(dir, "dhclient.pid")
	t.Cleanup(func() {
		if b, err := os.ReadFile(pid); err == nil {
			var p int
			for _, c := range strings.TrimSpace(string(b)) {
				p = p*10 + int(c-'0')
			}
			syscall.Kill(p, syscall.SIGTERM)
		}
	})
	if out, err := testnet.InVM(ns, "timeout", "30", "dhclient", "-1", "-v", "-pf", pid, "-lf", filepath.Join(dir, "leases"), vmIf); err != nil {
		t.Fatalf("dhclient: %v\n%s", err, out)
	}
	addrs := testnet.Run(t, "ip", "-n", ns, "-4", "addr", "show", "dev", vmIf)
	routes := testnet.Run(t, "ip", "-n", ns, "route")
	resolv, _ := os.ReadFile(filepath.Join("/etc/netns", ns, "resolv.conf"))
	link := testnet.Run(t, "ip", "-n", ns, "link", "show", "dev", vmIf)
	if !strings.Contains(link, "mtu 9000") {
		t.Errorf("the VM's MTU after DHCP: %s", link)
	}
	if !strings.Contains(addrs, "inet 10.0.2.15/24") || !strings.Contains(routes, "default via 10.0.2.2") || !strings.Contains(string(resolv), "nameserver 10.0.2.2") {
		t.Fatalf("after DHCP:\n%s\n%s\n%s", addrs, routes, resolv)
	}
}
