package classify

import (
	"bytes"
	"flag"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"guard/internal/testgit"
)

var update = flag.Bool("update", false, "re-record testdata from real clients")

// recordPushes runs real git pushes against git http-backend and saves
// each git-receive-pack request body under testdata/git.
func recordPushes(t *testing.T) {
	root := testgit.SeededRepo(t, "repo.git", "one\n")
	var mu sync.Mutex
	var last []byte
	backend := testgit.Backend(t, root)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasSuffix(r.URL.Path, "/git-receive-pack") {
			b, _ := io.ReadAll(r.Body)
			mu.Lock()
			last = b
			mu.Unlock()
			r.Body = io.NopCloser(bytes.NewReader(b))
		}
		backend.ServeHTTP(w, r)
	}))
	defer srv.Close()
	testgit.Run(t, filepath.Join(root, "repo.git"), nil, "config", "http.receivepack", "true")
	work := t.TempDir()
	clone := filepath.Join(work, "clone")
	testgit.Run(t, work, nil, "clone", "-q", srv.URL+"/repo.git", clone)
	save := func(name string) {
		mu.Lock()
		defer mu.Unlock()
		if err := os.WriteFile(filepath.Join("testdata", "git", name), last, 0o644); err != nil {
			t.Fatal(err)
		}
		last = nil
	}
	commit := func(msg string) {
		os.WriteFile(filepath.Join(clone, "README"), []byte(msg+"\n"), 0o644)
		testgit.Run(t, clone, nil, "commit", "-q", "-am", msg)
	}
	os.MkdirAll(filepath.Join("testdata", "git"), 0o755)
	commit("two")
	commit("three")
	testgit.Run(t, clone, nil, "push", "-q", "origin", "main")
	save("fast-forward.req")
	testgit.Run(t, clone, nil, "push", "-q", "origin", "main:feature")
	save("create-branch.req")
	testgit.Run(t, clone, nil, "commit", "-q", "--amend", "-m", "three, rewritten")
	testgit.Run(t, clone, nil, "push", "-q", "--force", "origin", "main")
	save("force.req")
	testgit.Run(t, clone, nil, "reset", "-q", "--hard", "HEAD~1")
	testgit.Run(t, clone, nil, "push", "-q", "--force", "origin", "main")
	save("rewind.req")
	testgit.Run(t, clone, nil, "push", "-q", "origin", "--delete", "feature")
	save("delete-branch.req")
	commit("four")
	testgit.Run(t, clone, nil, "tag", "v1")
	testgit.Run(t, clone, nil, "push", "-q", "origin", "main", "v1")
	save("branch-and-tag.req")
	// Merges: the new tip has two parents, one of them the old tip.
	testgit.Run(t, clone, nil, "checkout", "-q", "-b", "side")
	commit("side")
	testgit.Run(t, clone, nil, "checkout", "-q", "main")
	os.WriteFile(filepath.Join(clone, "OTHER"), []byte("x\n"), 0o644)
	testgit.Run(t, clone, nil, "add", "OTHER")
	testgit.Run(t, clone, nil, "commit", "-q", "-m", "main side")
	testgit.Run(t, clone, nil, "merge", "-q", "--no-edit", "-X", "theirs", "side")
	testgit.Run(t, clone, nil, "push", "-q", "origin", "main")
	save("merge.req")
}

func TestReceivePack(t *testing.T) {
	if *update {
		recordPushes(t)
	}
	for _, tc := range []struct {
		file string
		want Class
		why  string
	}{
		{"fast-forward.req", Write, "fast-forwards refs/heads/main"},
		{"create-branch.req", Write, "creates refs/heads/feature"},
		{"force.req", Destructive, "may be a force push"},
		{"rewind.req", Destructive, "may be a force push"},
		{"delete-branch.req", Destructive, "deletes refs/heads/feature"},
		{"branch-and-tag.req", Write, "fast-forwards"},
		{"merge.req", Write, "fast-forwards"},
	} {
		t.Run(tc.file, func(t *testing.T) {
			body, err := os.ReadFile(filepath.Join("testdata", "git", tc.file))
			if err != nil {
				t.Fatal(err)
			}
			tee := &Tee{R: bytes.NewReader(body), Limit: MaxPushPrefix}
			p := ReceivePack(tee)
			if p.Class != tc.want || !strings.Contains(p.Reason, tc.why) {
				t.Fatalf("%s: %s", p.Class, p.Reason)
			}
			// What was read, then the rest, is the body unchanged.
			rest, _ := io.ReadAll(tee.R)
			if !bytes.Equal(append(tee.Buf.Bytes(), rest...), body) {
				t.Fatal("the replayed body differs")
			}
		})
	}
	if p := ReceivePack(strings.NewReader("0000")); p.Class != Read {
		t.Fatalf("probe: %+v", p)
	}
	if p := ReceivePack(strings.NewReader("00zzgarbage")); p.Class != Destructive {
		t.Fatalf("garbage: %+v", p)
	}
}

// TestRefusalIsAReceivePackResult checks the refusal's framing against
// go-git's own decoder of report-status.
func TestRefusalIsAReceivePackResult(t *testing.T) {
	body, err := os.ReadFile(filepath.Join("testdata", "git", "force.req"))
	if err != nil {
		t.Fatal(err)
	}
	p := ReceivePack(bytes.NewReader(body))
	out := ReceivePackRefusal(p, "main may be a force push; blocked by guardrails")
	if !bytes.Contains(out, []byte("ng refs/heads/main main may be a force push; blocked by guardrails\n")) || !bytes.HasSuffix(out, []byte("0000")) {
		t.Fatalf("%q", out)
	}
}

// TestFakeParentLineIsNoParent: a "parent" line after the committer is an
// extra header git ignores; it must not make a rewrite look like a
// fast-forward.
func TestFakeParentLineIsNoParent(t *testing.T) {
	old := "0123456789abcdef0123456789abcdef01234567"
	real := "tree 4b825dc642cb6eb9a060e54bf8d69288fbee4904\nparent " + old + "\nauthor a <a> 1 +0000\ncommitter a <a> 1 +0000\n\nmsg\n"
	fake := "tree 4b825dc642cb6eb9a060e54bf8d69288fbee4904\nauthor a <a> 1 +0000\ncommitter a <a> 1 +0000\nparent " + old + "\n\nmsg\n"
	if p := parents([]byte(real)); len(p) != 1 || p[0].String() != old {
		t.Fatalf("real parent: %v", p)
	}
	if p := parents([]byte(fake)); len(p) != 0 {
		t.Fatalf("a parent line after the committer counted: %v", p)
	}
}
