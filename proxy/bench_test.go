package proxy

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"slices"
	"sync"
	"testing"
	"time"
)

// benchClients returns an HTTP/1.1 client through guard's transparent entry
// and one straight to the upstream, both trusting what they must.
func benchClients(b *testing.B, ew *exactWorld, r *rig, keepAlive bool) (guard, direct *http.Client) {
	guard = r.transparentClient(ew.exact.addr, false)
	guard.Transport.(*http.Transport).DisableKeepAlives = !keepAlive
	dst := ew.exact.addr.String()
	direct = &http.Client{Transport: &http.Transport{
		Proxy: nil,
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "tcp", dst)
		},
		TLSClientConfig:   &tls.Config{RootCAs: ew.pki.Pool},
		TLSNextProto:      map[string]func(string, *tls.Conn) http.RoundTripper{},
		DisableKeepAlives: !keepAlive,
	}}
	return guard, direct
}

func get(b *testing.B, c *http.Client, u string) {
	resp, err := c.Get(u)
	if err != nil {
		b.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
}

// timeEach returns the per-request durations of n requests.
func timeEach(b *testing.B, c *http.Client, u string, n int) []time.Duration {
	d := make([]time.Duration, n)
	for i := range d {
		start := time.Now()
		get(b, c, u)
		d[i] = time.Since(start)
	}
	return d
}

func median(d []time.Duration) time.Duration {
	s := slices.Clone(d)
	slices.Sort(s)
	return s[len(s)/2]
}

func total(d []time.Duration) (t time.Duration) {
	for _, x := range d {
		t += x
	}
	return t
}

// BenchmarkKeepAliveRequests: small HTTPS requests on kept-alive
// connections, through guard (MITM, rules, events) and direct, in the same
// run. Reports requests/s each way and the ratio.
func BenchmarkKeepAliveRequests(b *testing.B) {
	ew := newExactWorld(b)
	r := ew.rig(b, "allow any 127.0.0.0/8\ndefault allow\n")
	guard, direct := benchClients(b, ew, r, true)
	u := url(ew.exact, "/small")
	get(b, guard, u)
	get(b, direct, u)
	for b.Loop() {
		get(b, guard, u)
	}
	b.StopTimer()
	const n = 3000
	g, d := total(timeEach(b, guard, u, n)), total(timeEach(b, direct, u, n))
	b.ReportMetric(float64(n)/g.Seconds(), "guard-req/s")
	b.ReportMetric(float64(n)/d.Seconds(), "direct-req/s")
	b.ReportMetric(d.Seconds()/g.Seconds(), "ratio-to-direct")
}

// BenchmarkNewConnection: one request per new TCP+TLS connection, the leaf
// already cached. Reports the median time through guard and direct, and
// what guard adds.
func BenchmarkNewConnection(b *testing.B) {
	ew := newExactWorld(b)
	r := ew.rig(b, "allow any 127.0.0.0/8\ndefault allow\n")
	guard, direct := benchClients(b, ew, r, false)
	u := url(ew.exact, "/small")
	get(b, guard, u) // caches the leaf
	for b.Loop() {
		get(b, guard, u)
	}
	b.StopTimer()
	const n = 400
	g, d := median(timeEach(b, guard, u, n)), median(timeEach(b, direct, u, n))
	b.ReportMetric(float64(g.Microseconds())/1000, "guard-ms")
	b.ReportMetric(float64(d.Microseconds())/1000, "direct-ms")
	b.ReportMetric(float64((g-d).Microseconds())/1000, "added-ms")
}

// BenchmarkBulkDownload: one 64 MiB download over TLS, through guard and
// direct. Reports MB/s each way and the ratio.
func BenchmarkBulkDownload(b *testing.B) {
	ew := newExactWorld(b)
	r := ew.rig(b, "allow any 127.0.0.0/8\ndefault allow\n")
	guard, direct := benchClients(b, ew, r, true)
	const size = 64 << 20
	u := url(ew.exact, fmt.Sprintf("/download?n=%d", size))
	b.SetBytes(size)
	for b.Loop() {
		get(b, guard, u)
	}
	b.StopTimer()
	const n = 5
	g, d := total(timeEach(b, guard, u, n)), total(timeEach(b, direct, u, n))
	b.ReportMetric(float64(n*size)/g.Seconds()/1e6, "guard-MB/s")
	b.ReportMetric(float64(n*size)/d.Seconds()/1e6, "direct-MB/s")
	b.ReportMetric(d.Seconds()/g.Seconds(), "ratio-to-direct")
}

var _ = netip.Addr{}

// BenchmarkKeepAliveParallel: 8 clients, each on its own kept-alive
// connection, as a busy agent's tools would be; requests/s through guard
// and direct, in the same run.
func BenchmarkKeepAliveParallel(b *testing.B) {
	ew := newExactWorld(b)
	r := ew.rig(b, "allow any 127.0.0.0/8\ndefault allow\n")
	guard, direct := benchClients(b, ew, r, true)
	guard.Transport.(*http.Transport).MaxIdleConnsPerHost = 8
	direct.Transport.(*http.Transport).MaxIdleConnsPerHost = 8
	u := url(ew.exact, "/small")
	run := func(c *http.Client, n int) time.Duration {
		start := time.Now()
		var wg sync.WaitGroup
		for range 8 {
			wg.Go(func() {
				for range n / 8 {
					get(b, c, u)
				}
			})
		}
		wg.Wait()
		return time.Since(start)
	}
	run(guard, 64)
	run(direct, 64)
	for b.Loop() {
		get(b, guard, u)
	}
	b.StopTimer()
	const n = 8000
	g, d := run(guard, n), run(direct, n)
	b.ReportMetric(float64(n)/g.Seconds(), "guard-req/s")
	b.ReportMetric(float64(n)/d.Seconds(), "direct-req/s")
	b.ReportMetric(d.Seconds()/g.Seconds(), "ratio-to-direct")
}
