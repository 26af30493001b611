// Package testnet makes the network namespaces that tests use as a VM: a
// veth whose far end is inside the namespace, with an address, a default
// route and a resolv.conf, all removed when the test ends. It needs root.
package testnet

import (
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
)

var counter atomic.Int32

// Run runs a command and fails the test on error.
func Run(t testing.TB, args ...string) string {
	t.Helper()
	out, err := exec.Command(args[0], args[1:]...).CombinedOutput()
	if err != nil {
		t.Fatalf("%v: %v\n%s", args, err, out)
	}
	return string(out)
}

// VM makes a namespace whose interface has vmAddr (e.g. 10.0.2.15/24) and
// routes everything, DNS included, through gateway. It returns the
// namespace's name and the host end of the veth.
func VM(t testing.TB, vmAddr netip.Prefix, gateway netip.Addr) (ns, hostIf string) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Fatal("network namespace tests need root, as the sessions and CI have")
	}
	id := fmt.Sprintf("%d%d", os.Getpid()%10000, counter.Add(1))
	ns, hostIf, vmIf := "gvm"+id, "gva"+id, "gvb"+id
	exec.Command("ip", "netns", "del", ns).Run()
	exec.Command("ip", "link", "del", hostIf).Run()
	Run(t, "ip", "netns", "add", ns)
	t.Cleanup(func() {
		exec.Command("ip", "netns", "del", ns).Run()
		exec.Command("ip", "link", "del", hostIf).Run()
		os.RemoveAll(filepath.Join("/etc/netns", ns))
	})
	Run(t, "ip", "link", "add", hostIf, "type", "veth", "peer", "name", vmIf)
	Run(t, "ip", "link", "set", vmIf, "netns", ns)
	Run(t, "ip", "link", "set", hostIf, "up")
	Run(t, "ip", "-n", ns, "addr", "add", vmAddr.String(), "dev", vmIf)
	Run(t, "ip", "-n", ns, "link", "set", vmIf, "up")
	Run(t, "ip", "-n", ns, "link", "set", "lo", "up")
	Run(t, "ip", "-n", ns, "route", "add", "default", "via", gateway.String())
	os.MkdirAll(filepath.Join("/etc/netns", ns), 0o755)
	os.WriteFile(filepath.Join("/etc/netns", ns, "resolv.conf"), []byte("nameserver "+gateway.String()+"\n"), 0o644)
	return ns, hostIf
}

// BareVM makes a namespace whose interface has no address yet (for a DHCP
// client to configure), with an empty resolv.conf of its own so that
// nothing in it writes the host's. It returns the namespace, the host end
// and the namespace's end of the veth.
func BareVM(t testing.TB) (ns, hostIf, vmIf string) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Fatal("network namespace tests need root, as the sessions and CI have")
	}
	id := fmt.Sprintf("%d%d", os.Getpid()%10000, counter.Add(1))
	ns, hostIf, vmIf = "gvm"+id, "gva"+id, "gvb"+id
	exec.Command("ip", "netns", "del", ns).Run()
	exec.Command("ip", "link", "del", hostIf).Run()
	os.MkdirAll(filepath.Join("/etc/netns", ns), 0o755)
	os.WriteFile(filepath.Join("/etc/netns", ns, "resolv.conf"), nil, 0o644)
	Run(t, "ip", "netns", "add", ns)
	t.Cleanup(func() {
		exec.Command("ip", "netns", "del", ns).Run()
		exec.Command("ip", "link", "del", hostIf).Run()
		os.RemoveAll(filepath.Join("/etc/netns", ns))
	})
	Run(t, "ip", "link", "add", hostIf, "type", "veth", "peer", "name", vmIf)
	Run(t, "ip", "link", "set", vmIf, "netns", ns)
	Run(t, "ip", "link", "set", hostIf, "up")
	Run(t, "ip", "-n", ns, "link", "set", vmIf, "up")
	Run(t, "ip", "-n", ns, "link", "set", "lo", "up")
	return ns, hostIf, vmIf
}

// HostAddresses puts test "internet" addresses on the host's loopback
// interface, where the test's servers listen.
func HostAddresses(t testing.TB, addrs ...string) {
	t.Helper()
	for _, a := range addrs {
		exec.Command("ip", "addr", "del", a+"/32", "dev", "lo").Run()
		Run(t, "ip", "addr", "add", a+"/32", "dev", "lo")
		t.Cleanup(func() { exec.Command("ip", "addr", "del", a+"/32", "dev", "lo").Run() })
	}
}

// InVM runs a command inside the namespace, with a clean environment.
func InVM(ns string, args ...string) (string, error) {
	cmd := exec.Command("ip", append([]string{"netns", "exec", ns}, args...)...)
	cmd.Env = []string{"PATH=/usr/bin:/bin:/usr/sbin:/sbin"}
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// SetMTU sets the MTU of both ends of a namespace's veth made by VM.
func SetMTU(t testing.TB, ns, hostIf string, mtu int) {
	t.Helper()
	vmIf := "gvb" + strings.TrimPrefix(hostIf, "gva")
	Run(t, "ip", "link", "set", hostIf, "mtu", fmt.Sprint(mtu))
	Run(t, "ip", "-n", ns, "link", "set", vmIf, "mtu", fmt.Sprint(mtu))
}
