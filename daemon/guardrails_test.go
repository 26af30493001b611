package daemon

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"io"
	"net/http/httptest"
	"strings"
	"testing"

	"guard/audit"
	"guard/classify"
	"guard/workspace"
)

// TestGuardrailsModes runs forge requests through the guardrails hook
// under each mode, with no prompter attached (so every ask is denied).
func TestGuardrailsModes(t *testing.T) {
	for _, tc := range []struct {
		mode, method, url string
		blocked           bool
		because           string
	}{
		{"off", "DELETE", "https://api.github.com/repos/o/r", false, ""},
		{"readOnly", "GET", "https://api.github.com/repos/o/r", false, ""},
		{"readOnly", "POST", "https://api.github.com/repos/o/r/issues", true, `is not allowed while "github" is readOnly`},
		{"readOnly", "POST", "https://github.com/o/r.git/git-upload-pack", false, ""},
		{"readOnly", "POST", "https://github.com/o/r.git/git-receive-pack", true, "unpack ok"},
		{"readOnly", "POST", "https://api.github.com/graphql", true, "(unknown: "},
		{"destructive", "DELETE", "https://api.github.com/repos/o/r", true, `is not allowed while "github" is destructive`},
		{"destructive", "PATCH", "https://api.github.com/repos/o/r", false, ""},
		{"promptOnWrite", "GET", "https://raw.githubusercontent.com/o/r/main/x", false, ""},
		{"promptOnWrite", "PATCH", "https://api.github.com/repos/o/r", true, "no prompter is attached"},
		{"promptOnWrite", "DELETE", "https://notgithub.com/repos/o/r", false, ""},
	} {
		t.Run(tc.mode+"/"+tc.method+" "+tc.url, func(t *testing.T) {
			load := func() (*workspace.Profile, error) {
				return workspace.Parse([]byte(`{"name":"g","guardrails":{"github":"`+tc.mode+`"}}`), "test", "")
			}
			d, _ := startDaemon(t, Config{LoadProfile: load})
			r := httptest.NewRequest(tc.method, tc.url, nil)
			blk, err := guardrails{d}.Check(context.Background(), r)
			if err != nil {
				t.Fatal(err)
			}
			if (blk != nil) != tc.blocked {
				t.Fatalf("blocked=%v, want %v", blk != nil, tc.blocked)
			}
			if blk == nil {
				return
			}
			var body struct{ Message string }
			switch {
			case strings.HasSuffix(tc.url, "git-receive-pack"):
				// A refused push is a receive-pack result git can print.
				if blk.Status != 200 || blk.Header.Get("Content-Type") != "application/x-git-receive-pack-result" || !strings.Contains(string(blk.Body), tc.because) {
					t.Fatalf("push refusal %d %q", blk.Status, blk.Body)
				}
			default:
				if json.Unmarshal(blk.Body, &body); blk.Status != 403 || !strings.HasSuffix(body.Message, "blocked by guardrails") || !strings.Contains(body.Message, tc.because) {
					t.Fatalf("block %d %s", blk.Status, blk.Body)
				}
			}
			var found bool
			for _, e := range d.Events().Recent(0) {
				found = found || (e.Type == audit.TypeBlock && e.Service == "github" && e.Mode == tc.mode && e.Method == tc.method && e.Path == r.URL.Path)
			}
			if !found {
				t.Fatalf("no guardrails.block event: %+v", d.Events().Recent(0))
			}
		})
	}
}

// TestCompressedBodiesAreRead: a gzip-compressed GraphQL mutation is
// classified like a plain one, and a body in an encoding guard cannot read
// is unknown, never a read.
func TestCompressedBodiesAreRead(t *testing.T) {
	load := func() (*workspace.Profile, error) {
		return workspace.Parse([]byte(`{"name":"g","guardrails":{"github":"destructive"}}`), "test", "")
	}
	d, _ := startDaemon(t, Config{LoadProfile: load})
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	zw.Write([]byte(`{"query":"mutation { deleteRepository(input:{repositoryId:\"x\"}) { clientMutationId } }"}`))
	zw.Close()
	r := httptest.NewRequest("POST", "https://api.github.com/graphql", bytes.NewReader(gz.Bytes()))
	r.Header.Set("Content-Encoding", "gzip")
	blk, _ := guardrails{d}.Check(context.Background(), r)
	if blk == nil {
		t.Fatal("a gzip-compressed deleteRepository passed under destructive")
	}
	// The body still goes upstream as the client sent it.
	if sent, _ := io.ReadAll(r.Body); !bytes.Equal(sent, gz.Bytes()) {
		t.Fatal("the compressed body was not replayed untouched")
	}
	r = httptest.NewRequest("POST", "https://api.github.com/graphql", strings.NewReader("(zstd bytes)"))
	r.Header.Set("Content-Encoding", "zstd")
	op := classify.Classify(classify.Route{Kind: classify.KindForge, Service: "github", Scope: "github"}, classify.NewRequest("POST", "api.github.com", "/graphql", "", nil))
	if op.Class == classify.Read {
		t.Fatal("an unreadable GraphQL body classified as a read")
	}
}
