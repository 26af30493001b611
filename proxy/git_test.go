package proxy

import (
	"net/http"
	"net/http/cgi"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// gitBackend serves repositories under root with git http-backend behind
// net/http/cgi, pushes included.
func gitBackend(t *testing.T, root string) http.Handler {
	t.Helper()
	gitPath, err := exec.LookPath("git")
	if err != nil {
		t.Fatal("git is needed: .ci/run installs it")
	}
	return &cgi.Handler{
		Path: gitPath,
		Args: []string{"http-backend"},
		Env:  []string{"GIT_PROJECT_ROOT=" + root, "GIT_HTTP_EXPORT_ALL=1", "REMOTE_USER=tester"},
	}
}

func git(t *testing.T, dir string, env []string, args ...string) string {
	t.Helper()
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	cmd.Env = append([]string{"PATH=/usr/bin:/bin", "HOME=" + dir, "GIT_CONFIG_NOSYSTEM=1",
		"GIT_AUTHOR_NAME=t", "GIT_AUTHOR_EMAIL=t@example.test", "GIT_COMMITTER_NAME=t", "GIT_COMMITTER_EMAIL=t@example.test"}, env...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("git %v: %v\n%s", args, err, out)
	}
	return string(out)
}

// TestGitCloneFetchPush runs the real git client through the explicit proxy
// against git http-backend over HTTPS.
func TestGitCloneFetchPush(t *testing.T) {
	w := newWorld(t)
	root := t.TempDir()
	git(t, root, nil, "init", "-q", "--bare", "-b", "main", "repo.git")
	git(t, filepath.Join(root, "repo.git"), nil, "config", "http.receivepack", "true")
	gh := startUpstream(t, w.pki, "127.0.0.7", "git.example.test", gitBackend(t, root))
	w.hosts["git.example.test"] = "127.0.0.7"
	r := w.rig(t, "allow tcp git.example.test\ndefault deny\n")

	work := t.TempDir()
	env := []string{"GIT_SSL_CAINFO=" + r.caFile, "https_proxy=http://" + r.explicit}
	seed := filepath.Join(work, "seed")
	git(t, work, env, "init", "-q", "-b", "main", seed)
	os.WriteFile(filepath.Join(seed, "README"), []byte("hello\n"), 0o644)
	git(t, seed, env, "add", "README")
	git(t, seed, env, "commit", "-q", "-m", "first")
	remote := url(gh, "/repo.git")
	git(t, seed, env, "push", "-q", remote, "main")

	clone := filepath.Join(work, "clone")
	git(t, work, env, "clone", "-q", remote, clone)
	if b, err := os.ReadFile(filepath.Join(clone, "README")); err != nil || string(b) != "hello\n" {
		t.Fatalf("clone: %q %v", b, err)
	}
	os.WriteFile(filepath.Join(seed, "README"), []byte("hello again\n"), 0o644)
	git(t, seed, env, "commit", "-q", "-am", "second")
	git(t, seed, env, "push", "-q", remote, "main")
	git(t, clone, env, "fetch", "-q")
	if log := git(t, clone, env, "log", "--oneline", "origin/main"); strings.Count(log, "\n") != 2 {
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
