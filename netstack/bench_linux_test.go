package netstack

import (
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"os/exec"
	"testing"
	"time"

	"guard/firewall"
	"guard/internal/testnet"
	"guard/rules"
)

// sink accepts connections on addr and discards what they send.
func sink(b *testing.B, addr string) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() { io.Copy(io.Discard, c); c.Close() }()
		}
	}()
}

// timeInNS runs a bash snippet in a namespace and returns how long it took.
func timeInNS(b *testing.B, ns, script string) time.Duration {
	start := time.Now()
	if out, err := testnet.InVM(ns, "bash", "-c", script); err != nil {
		b.Fatalf("%s: %v %s", script, err, out)
	}
	return time.Since(start)
}

// BenchmarkNamespaceThroughput sends 256 MiB over TCP from a namespace to a
// host server, through guard's stack (AF_PACKET link, MTU 1500), and the
// same from a second namespace over a plain kernel veth route, in the same
// run; then 200 short connections each way. Reports MB/s, connections/s
// and the ratios to the kernel route.
func BenchmarkNamespaceThroughput(b *testing.B) {
	testnet.HostAddresses(b, "198.18.0.40")
	sink(b, "198.18.0.40:5201")

	// Through guard.
	gns, hostIf := testnet.VM(b, netip.MustParsePrefix("10.79.0.2/24"), netip.MustParseAddr("10.79.0.1"))
	pol, _ := rules.ParseString("allow tcp 198.18.0.40:5201\ndefault deny\n")
	active := firewall.NewActive(firewall.Compile(pol))
	ep, closeEP, err := OpenAFPacket(hostIf, 1500)
	if err != nil {
		b.Fatal(err)
	}
	defer closeEP()
	st, err := New(Config{Gateway: netip.MustParsePrefix("10.79.0.1/24"), Decide: &decider{active: active},
		Names: firewall.NewSnoopTable(firewall.SnoopOptions{}), Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}, ep)
	if err != nil {
		b.Fatal(err)
	}
	defer st.Close()

	// The kernel route: host end of the veth gets the gateway address, and
	// the host delivers to its own 198.18.0.40.
	kns, kIf := testnet.VM(b, netip.MustParsePrefix("10.80.0.2/24"), netip.MustParseAddr("10.80.0.1"))
	testnet.Run(b, "ip", "addr", "add", "10.80.0.1/24", "dev", kIf)
	exec.Command("ethtool", "-K", kIf, "tx", "off").Run() // best effort; not needed by the kernel path

	const mib = 256
	send := fmt.Sprintf("dd if=/dev/zero bs=1M count=%d status=none > /dev/tcp/198.18.0.40/5201", mib)
	conns := "for i in $(seq 200); do exec 3<>/dev/tcp/198.18.0.40/5201; exec 3>&-; done"
	timeInNS(b, gns, "head -c 1M /dev/zero > /dev/tcp/198.18.0.40/5201") // warm up
	for b.Loop() {
		timeInNS(b, gns, send)
	}
	b.StopTimer()
	g, k := timeInNS(b, gns, send), timeInNS(b, kns, send)
	gc, kc := timeInNS(b, gns, conns), timeInNS(b, kns, conns)
	b.ReportMetric(mib*1.048576/g.Seconds(), "guard-MB/s")
	b.ReportMetric(mib*1.048576/k.Seconds(), "kernel-MB/s")
	b.ReportMetric(k.Seconds()/g.Seconds(), "throughput-ratio")
	b.ReportMetric(200/gc.Seconds(), "guard-conn/s")
	b.ReportMetric(200/kc.Seconds(), "kernel-conn/s")
}
