package netstack

import (
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
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

// source accepts connections on addr and sends each one n MiB of zeros.
func source(b *testing.B, addr string, n int) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { ln.Close() })
	zeros := make([]byte, 1<<20)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				for range n {
					if _, err := c.Write(zeros); err != nil {
						break
					}
				}
				c.Close()
			}()
		}
	}()
}

// BenchmarkNamespaceThroughput measures, at MTU 1500 and at jumbo MTUs, a
// namespace talking to host servers through guard's stack (AF_PACKET link)
// and a second namespace over a plain kernel veth route with the same MTU,
// in the same run: 256 MiB sent (upload), 256 MiB received (download), and
// 200 short connections. It reports MB/s, connections/s and the ratios to
// the kernel route.
func BenchmarkNamespaceThroughput(b *testing.B) {
	const mib = 256
	testnet.HostAddresses(b, "198.18.0.40")
	sink(b, "198.18.0.40:5201")
	source(b, "198.18.0.40:5202", mib)
	for i, mtu := range []int{1500, 9000, 65520} {
		b.Run(fmt.Sprintf("mtu=%d", mtu), func(b *testing.B) {
			// Through guard.
			gns, hostIf := testnet.VM(b, netip.MustParsePrefix(fmt.Sprintf("10.79.%d.2/24", i)), netip.MustParseAddr(fmt.Sprintf("10.79.%d.1", i)))
			testnet.SetMTU(b, gns, hostIf, mtu)
			pol, _ := rules.ParseString("allow tcp 198.18.0.40\ndefault deny\n")
			active := firewall.NewActive(firewall.Compile(pol))
			ep, closeEP, err := OpenAFPacket(hostIf, 0)
			if err != nil {
				b.Fatal(err)
			}
			defer closeEP()
			st, err := New(Config{Gateway: netip.MustParsePrefix(fmt.Sprintf("10.79.%d.1/24", i)), Decide: &decider{active: active},
				Names: firewall.NewSnoopTable(firewall.SnoopOptions{}), Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}, ep)
			if err != nil {
				b.Fatal(err)
			}
			defer st.Close()

			// The kernel route: the host end of the veth gets the gateway
			// address, and the host delivers to its own 198.18.0.40.
			kns, kIf := testnet.VM(b, netip.MustParsePrefix(fmt.Sprintf("10.80.%d.2/24", i)), netip.MustParseAddr(fmt.Sprintf("10.80.%d.1", i)))
			testnet.SetMTU(b, kns, kIf, mtu)
			testnet.Run(b, "ip", "addr", "add", fmt.Sprintf("10.80.%d.1/24", i), "dev", kIf)

			send := fmt.Sprintf("dd if=/dev/zero bs=1M count=%d status=none > /dev/tcp/198.18.0.40/5201", mib)
			receive := "cat < /dev/tcp/198.18.0.40/5202 > /dev/null"
			conns := "for i in $(seq 200); do exec 3<>/dev/tcp/198.18.0.40/5201; exec 3>&-; done"
			timeInNS(b, gns, "head -c 1M /dev/zero > /dev/tcp/198.18.0.40/5201") // warm up
			for b.Loop() {
				timeInNS(b, gns, send)
			}
			b.StopTimer()
			gu, ku := timeInNS(b, gns, send), timeInNS(b, kns, send)
			gd, kd := timeInNS(b, gns, receive), timeInNS(b, kns, receive)
			gc, kc := timeInNS(b, gns, conns), timeInNS(b, kns, conns)
			mb := mib * 1.048576
			b.ReportMetric(mb/gu.Seconds(), "up-guard-MB/s")
			b.ReportMetric(mb/ku.Seconds(), "up-kernel-MB/s")
			b.ReportMetric(ku.Seconds()/gu.Seconds(), "up-ratio")
			b.ReportMetric(mb/gd.Seconds(), "down-guard-MB/s")
			b.ReportMetric(mb/kd.Seconds(), "down-kernel-MB/s")
			b.ReportMetric(kd.Seconds()/gd.Seconds(), "down-ratio")
			b.ReportMetric(200/gc.Seconds(), "guard-conn/s")
			b.ReportMetric(200/kc.Seconds(), "kernel-conn/s")
			b.ReportMetric(kc.Seconds()/gc.Seconds(), "conn-ratio")
		})
	}
}
