package proxy

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"guard/internal/testgit"
)

// TestGitCloneFetchPush runs the real git client through the explicit proxy
// against git http-backend over HTTPS.
func TestGitCloneFetchPush(t *testing.T) {
	w := newWorld(t)
	root := t.TempDir()
	testgit.Run(t, root, nil, "init", "-q", "--bare", "-b", "main", "repo.git")
	testgit.Run(t, filepath.Join(root, "repo.git"), nil, "config", "http.receivepack", "true")
	gh := startUpstream(t, w.pki, "127.0.0.7", "git.example.test", testgit.Backend(t, root))
	w.hosts["git.example.test"] = "127.0.0.7"
	r := w.rig(t, "allow tcp git.example.test\ndefault deny\n")

	work := t.TempDir()
	env := []string{"GIT_SSL_CAINFO=" + r.caFile, "https_proxy=http://" + r.explicit}
	seed := filepath.Join(work, "seed")
	testgit.Run(t, work, env, "init", "-q", "-b", "main", seed)
	os.WriteFile(filepath.Join(seed, "README"), []byte("hello\n"), 0o644)
	testgit.Run(t, seed, env, "add", "README")
	testgit.Run(t, seed, env, "commit", "-q", "-m", "first")
	remote := url(gh, "/repo.git")
	testgit.Run(t, seed, env, "push", "-q", remote, "main")

	clone := filepath.Join(work, "clone")
	testgit.Run(t, work, env, "clone", "-q", remote, clone)
	if b, err := os.ReadFile(filepath.Join(clone, "README")); err != nil || string(b) != "hello\n" {
		t.Fatalf("clone: %q %v", b, err)
	}
	os.WriteFile(filepath.Join(seed, "README"), []byte("hello again\n"), 0o644)
	testgit.Run(t, seed, env, "commit", "-q", "-am", "second")
	testgit.Run(t, seed, env, "push", "-q", remote, "main")
	testgit.Run(t, clone, env, "fetch", "-q")
	if log := testgit.Run(t, clone, env, "log", "--oneline", "origin/main"); strings.Count(log, "\n") != 2 {
		t.Fatalf("fetch: %s", log)
	}
	// Every request went through the pipeline and is on record.
	var smart int
	for _, e := range r.events.all() {
		if e.Layer == "http" && e.Host == "git.example.test" && e.Action == "allow" {
			smart++
		}
	}
	if smart < 6 {
		t.Fatalf("only %d request events for clone, fetch and two pushes", smart)
	}
}
