package proxy

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http/httptest"
	"testing"
	"time"

	"guard/audit"
)

// hundredCredentials loads 100 credentials whose fakes share the tag, as
// one install's do.
func hundredCredentials() *Swapper {
	var creds []*Credential
	for i := range 100 {
		fake := fmt.Sprintf("ghp_%s%028d", testTag, i)
		creds = append(creds, &Credential{ID: fmt.Sprint("c", i), Hosts: []string{fmt.Sprintf("h%d.example", i)}, Fake: fake,
			Real: func() (string, error) { return "real" + fake, nil }})
	}
	return NewSwapper(creds, []string{testTag, "0a1b2c3d", "Z9Y8X7W6"}, discardEvents{}, nil)
}

// discardEvents is an event sink that keeps nothing, so the benchmark
// measures the hook and not a growing list.
type discardEvents struct{}

func (discardEvents) Emit(context.Context, audit.Event) error { return nil }

// BenchmarkBodyScan streams a 4 MiB body through the fake scanner with 100
// credentials loaded, against copying it plainly, in the same run.
func BenchmarkBodyScan(b *testing.B) {
	s := hundredCredentials()
	body := bytes.Repeat([]byte("some JSON, {\"key\": \"value\", \"n\": 12345}, and text; "), 4<<20/52)
	var plain time.Duration
	b.SetBytes(int64(len(body)))
	for b.Loop() {
		start := time.Now()
		io.Copy(io.Discard, bytes.NewReader(body))
		plain += time.Since(start)
		r := &fakeScanner{s: s, ctx: context.Background(), host: "other.example", r: io.NopCloser(bytes.NewReader(body))}
		if _, err := io.Copy(io.Discard, r); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(plain.Nanoseconds())/float64(b.N), "ns/op-plain-copy")
}

// BenchmarkInject is the credential hook on a keep-alive request that
// carries a fake in its Authorization header, with 100 credentials.
func BenchmarkInject(b *testing.B) {
	s := hundredCredentials()
	fake := s.creds[57].Fake
	b.ReportAllocs()
	for b.Loop() {
		r := httptest.NewRequest("GET", "https://h57.example/user", nil)
		r.Header.Set("Authorization", "Bearer "+fake)
		r.Header.Set("Accept", "application/json")
		r.Header.Set("User-Agent", "bench")
		if _, blk, _ := s.Inject(context.Background(), r, Destination{Host: "h57.example", TLS: true}); blk != nil {
			b.Fatal(blk.Reason)
		}
	}
}

// BenchmarkInjectBaseline is the same request without credentials loaded,
// for the hook's added cost.
func BenchmarkInjectBaseline(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		r := httptest.NewRequest("GET", "https://h57.example/user", nil)
		r.Header.Set("Authorization", "Bearer x")
		r.Header.Set("Accept", "application/json")
		r.Header.Set("User-Agent", "bench")
	}
}
