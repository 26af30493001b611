package daemon

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// vmNamespace is a network namespace guardd made for the agent: a veth
// whose far end is eth0 inside it at 10.0.2.15/24, with the default route
// and DNS through guardd's gateway. guardd's end of the veth lives in a
// second, empty namespace (linkNS), so that no host network stack ever
// sees the VM's frames: only guardd's raw socket there. Everything is
// removed on exit.
type vmNamespace struct {
	name   string
	hostIf string
	linkNS string
}

// LinkPath is where guardd's end of the veth is: the namespace to open the
// raw socket in.
func (ns *vmNamespace) LinkPath() string { return filepath.Join("/run/netns", ns.linkNS) }

func ipCmd(args ...string) error {
	out, err := exec.Command("ip", args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("ip %s: %v: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

// createNamespace builds the namespace; it refuses one that exists, so as
// never to take over somebody else's.
func createNamespace(name string, mtu uint32) (*vmNamespace, error) {
	if os.Geteuid() != 0 {
		return nil, fmt.Errorf("--netns %s: creating a network namespace needs root", name)
	}
	if _, err := os.Stat(filepath.Join("/run/netns", name)); err == nil {
		return nil, fmt.Errorf("--netns %s: the namespace already exists; remove it (ip netns del %s) or pick another name", name, name)
	}
	sum := sha256.Sum256([]byte(name))
	ns := &vmNamespace{name: name, hostIf: "gv" + hex.EncodeToString(sum[:])[:10], linkNS: name + ".guard-link"}
	peer := ns.hostIf + "p"
	gw := VMGateway().Addr().String()
	steps := [][]string{
		{"netns", "add", name},
		{"link", "add", ns.hostIf, "mtu", fmt.Sprint(mtu), "type", "veth", "peer", "name", peer, "mtu", fmt.Sprint(mtu)},
		{"link", "set", peer, "netns", name},
		{"-n", name, "link", "set", peer, "name", "eth0"},
		{"-n", name, "addr", "add", "10.0.2.15/24", "dev", "eth0"},
		{"-n", name, "link", "set", "eth0", "up"},
		{"-n", name, "link", "set", "lo", "up"},
		{"-n", name, "route", "add", "default", "via", gw},
		{"netns", "add", ns.linkNS},
		{"link", "set", ns.hostIf, "netns", ns.linkNS},
		{"-n", ns.linkNS, "link", "set", ns.hostIf, "up"},
	}
	for _, s := range steps {
		if err := ipCmd(s...); err != nil {
			ns.remove()
			return nil, fmt.Errorf("--netns %s: %w", name, err)
		}
	}
	dir := filepath.Join("/etc/netns", name)
	if err := os.MkdirAll(dir, 0o755); err == nil {
		err = os.WriteFile(filepath.Join(dir, "resolv.conf"), []byte("nameserver "+gw+"\n"), 0o644)
	}
	return ns, nil
}

func (ns *vmNamespace) remove() {
	exec.Command("ip", "netns", "del", ns.linkNS).Run()
	exec.Command("ip", "netns", "del", ns.name).Run()
	exec.Command("ip", "link", "del", ns.hostIf).Run()
	os.RemoveAll(filepath.Join("/etc/netns", ns.name))
}
