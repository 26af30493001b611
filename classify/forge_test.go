package classify

import "testing"

func TestForgeService(t *testing.T) {
	for host, want := range map[string]string{
		"github.com": "github", "api.github.com": "github", "uploads.github.com": "github",
		"raw.githubusercontent.com": "github", "objects.githubusercontent.com": "github", "githubusercontent.com": "github",
		"gitlab.com": "gitlab", "registry.gitlab.com": "gitlab", "bitbucket.org": "bitbucket", "api.bitbucket.org": "bitbucket",
		"notgithub.com": "", "github.com.evil.test": "", "example.com": "", "gitlab.com.evil": "",
	} {
		if got := ForgeService(host); got != want {
			t.Errorf("%s: %q, want %q", host, got, want)
		}
	}
}

func TestForge(t *testing.T) {
	for _, tc := range []struct {
		method, path, query string
		want                Class
	}{
		{"GET", "/repos/o/r", "", Read},
		{"HEAD", "/repos/o/r", "", Read},
		{"OPTIONS", "/repos/o/r", "", Read},
		{"POST", "/repos/o/r/issues", "", Write},
		{"PATCH", "/repos/o/r", "", Write},
		{"PUT", "/repos/o/r/contents/x", "", Write},
		{"DELETE", "/repos/o/r", "", Destructive},
		{"GET", "/o/r.git/info/refs", "service=git-upload-pack", Read},
		{"GET", "/o/r.git/info/refs", "service=git-receive-pack", Read},
		{"POST", "/o/r.git/git-upload-pack", "", Read},
		{"POST", "/o/r.git/git-receive-pack", "", Write},
		{"POST", "/graphql", "", Unknown}, // no body given
		{"POST", "/api/graphql", "", Unknown},
		{"PATCH", "/repos/o/r/git/refs/heads/main", "", Unknown},
		{"PROPFIND", "/x", "", Write},
	} {
		op := Forge("github", NewRequest(tc.method, "api.github.com", tc.path, tc.query, nil))
		if op.Class != tc.want || op.Service != "github" || op.Scope != "github" || op.Detail != tc.method+" "+tc.path || op.Reason == "" {
			t.Errorf("%s %s: %+v, want %s", tc.method, tc.path, op, tc.want)
		}
	}
}

func TestForgeRefUpdate(t *testing.T) {
	for body, want := range map[string]Class{
		`{"sha":"abc","force":true}`:   Destructive,
		`{"sha":"abc","force":false}`:  Write,
		`{"sha":"abc"}`:                Write,
		`{"sha":"abc","force":"true"}`: Destructive,
		`not json`:                     Unknown,
	} {
		r := NewRequest("PATCH", "api.github.com", "/repos/o/r/git/refs/heads/main", "", nil)
		if !ForgeNeedsBody(r) {
			t.Fatal("a ref update needs its body")
		}
		r.Body = []byte(body)
		if op := Forge("github", r); op.Class != want {
			t.Errorf("%s: %s, want %s", body, op.Class, want)
		}
	}
}
