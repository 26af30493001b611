// Package testgit serves git repositories the way forges do for tests: the
// real git http-backend behind net/http/cgi, and the real git client to
// drive it.
package testgit

import (
	"net/http"
	"net/http/cgi"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// Backend serves the repositories under root with git http-backend, pushes
// included.
func Backend(t testing.TB, root string) http.Handler {
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

// Run runs git in dir with a clean environment plus env, and fails the
// test on error.
func Run(t testing.TB, dir string, env []string, args ...string) string {
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

// SeededRepo makes root/name, a bare repository whose main branch has one
// commit adding README with the given content, and returns root.
func SeededRepo(t testing.TB, name, readme string) string {
	t.Helper()
	root := t.TempDir()
	Run(t, root, nil, "init", "-q", "--bare", "-b", "main", name)
	seed := filepath.Join(t.TempDir(), "seed")
	Run(t, root, nil, "init", "-q", "-b", "main", seed)
	if err := os.WriteFile(filepath.Join(seed, "README"), []byte(readme), 0o644); err != nil {
		t.Fatal(err)
	}
	Run(t, seed, nil, "add", "README")
	Run(t, seed, nil, "commit", "-q", "-m", "first")
	Run(t, seed, nil, "push", "-q", filepath.Join(root, name), "main")
	return root
}
