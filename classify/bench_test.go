package classify

import (
	"bytes"
	"crypto/rand"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"guard/internal/testgit"
)

// BenchmarkREST is one REST request routed and classified: the cost on
// every intercepted request to a known service.
func BenchmarkREST(b *testing.B) {
	s := testServices()
	h := http.Header{"Authorization": {"AWS4-HMAC-SHA256 Credential=A/20261130/us-east-1/dynamodb/aws4_request, SignedHeaders=host, Signature=0"},
		"X-Amz-Target": {"DynamoDB_20120810.DeleteTable"}}
	for _, c := range []struct{ name, host, method, path, query string }{
		{"github", "api.github.com", "DELETE", "/repos/acme/site", ""},
		{"kubernetes", "kube.test", "GET", "/api/v1/namespaces/default/pods/web-1/exec", "command=sh"},
		{"aws-json", "dynamodb.us-east-1.amazonaws.com", "POST", "/", ""},
		{"registry", "registry.test", "DELETE", "/v2/team/app/manifests/sha256:abc", ""},
	} {
		b.Run(c.name, func(b *testing.B) {
			port := 443
			if c.host == "kube.test" {
				port = 6443
			} else if c.host == "registry.test" {
				port = 5000
			}
			b.ReportAllocs()
			for b.Loop() {
				rt, _ := s.Route(c.host, port)
				r := NewRequest(c.method, c.host, c.path, c.query, h)
				Classify(rt, r)
			}
		})
	}
}

// body4KB repeats unit up to 4 KiB.
func body4KB(unit string) string {
	var s strings.Builder
	for s.Len() < 4096 {
		s.WriteString(unit)
	}
	return s.String()
}

func BenchmarkSQL4KB(b *testing.B) {
	sql := body4KB("SELECT a, b, count() FROM events WHERE ts > now() - INTERVAL 1 DAY AND note != 'x; DROP' GROUP BY a, b; ") + "ALTER TABLE t DELETE WHERE 1"
	rt := Route{Kind: KindClickHouse, Service: "db:ch", Scope: "db:ch"}
	b.SetBytes(int64(len(sql)))
	b.ReportAllocs()
	for b.Loop() {
		r := NewRequest("POST", "ch", "/", "", nil)
		r.Body = []byte(sql)
		if Classify(rt, r).Class != Destructive {
			b.Fatal("missed the ALTER ... DELETE")
		}
	}
}

func BenchmarkGraphQL4KB(b *testing.B) {
	fields := body4KB("repository(owner:\\\"acme\\\", name:\\\"site\\\") { issues(first: 10) { nodes { title body } } } ")
	body := []byte(`{"query":"query { ` + fields + ` }"}`)
	b.Run("first-sight", func(b *testing.B) {
		b.SetBytes(int64(len(body)))
		b.ReportAllocs()
		for b.Loop() {
			if c, why := GraphQL(body, false); c != Read {
				b.Fatal(c, why)
			}
		}
	})
	// The same document again, with new variables: parsed once.
	b.Run("repeated", func(b *testing.B) {
		var cache Cache
		rt := Route{Kind: KindForge, Service: "github", Scope: "github"}
		b.SetBytes(int64(len(body)))
		b.ReportAllocs()
		for b.Loop() {
			r := NewRequest("POST", "api.github.com", "/graphql", "", nil)
			r.Body = body
			if op := cache.Classify(rt, r); op.Class != Read {
				b.Fatal(op)
			}
		}
	})
}

// pushBody makes a real receive-pack request body that updates main by one
// commit carrying size bytes of random data.
func pushBody(b *testing.B, size int) []byte {
	dir := b.TempDir()
	env := []string{}
	testgit.Run(b, dir, env, "init", "-q", "-b", "main", "repo")
	repo := filepath.Join(dir, "repo")
	os.WriteFile(filepath.Join(repo, "a"), []byte("a\n"), 0o644)
	testgit.Run(b, repo, env, "add", "a")
	testgit.Run(b, repo, env, "commit", "-q", "-m", "one")
	old := strings.TrimSpace(testgit.Run(b, repo, env, "rev-parse", "HEAD"))
	blob := make([]byte, size)
	rand.Read(blob)
	os.WriteFile(filepath.Join(repo, "big"), blob, 0o644)
	testgit.Run(b, repo, env, "add", "big")
	testgit.Run(b, repo, env, "commit", "-q", "-m", "big")
	tip := strings.TrimSpace(testgit.Run(b, repo, env, "rev-parse", "HEAD"))
	cmd := exec.Command("git", "pack-objects", "--stdout", "--revs", "-q")
	cmd.Dir = repo
	cmd.Stdin = strings.NewReader(tip + "\n^" + old + "\n")
	pack, err := cmd.Output()
	if err != nil {
		b.Fatal(err)
	}
	line := fmt.Sprintf("%s %s refs/heads/main\x00report-status side-band-64k\n", old, tip)
	return append([]byte(fmt.Sprintf("%04x%s0000", len(line)+4, line)), pack...)
}

// BenchmarkReceivePack50MB classifies a 50 MB push the way the hook does
// (the head through a Tee, then the rest streamed on) against streaming
// the same body alone, in the same run; it reports how much was read to
// classify and the heap used.
func BenchmarkReceivePack50MB(b *testing.B) {
	body := pushBody(b, 50<<20)
	b.SetBytes(int64(len(body)))
	var direct time.Duration
	var prefix int
	var heap uint64
	for b.Loop() {
		start := time.Now()
		io.Copy(io.Discard, bytes.NewReader(body))
		direct += time.Since(start)

		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		tee := &Tee{R: bytes.NewReader(body), Limit: MaxPushPrefix}
		p := ReceivePack(tee)
		if p.Class != Write {
			b.Fatalf("%s: %s", p.Class, p.Reason)
		}
		io.Copy(io.Discard, io.MultiReader(bytes.NewReader(tee.Buf.Bytes()), tee.R))
		runtime.ReadMemStats(&after)
		prefix = tee.Buf.Len()
		heap = after.TotalAlloc - before.TotalAlloc
	}
	b.ReportMetric(float64(prefix), "bytes-read-to-classify")
	b.ReportMetric(float64(heap)/(1<<20), "MiB-allocated")
	b.ReportMetric(float64(direct.Nanoseconds())/float64(b.N), "ns/op-stream-only")
}
