package workspace

import (
	"context"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

func TestFakesKeepShapeAndStay(t *testing.T) {
	dir := t.TempDir()
	t.Setenv("GUARD_TEST_GH", "ghp_"+strings.Repeat("r", 36))
	prof, err := Parse([]byte(`{"name":"s","credentials":[
	  {"id":"gh","title":"GitHub","service":"github","hosts":["github.com"],"secret":{"env":"GUARD_TEST_GH"}},
	  {"id":"pat","title":"Fine","service":"github","hosts":["github.com"],"secret":{"value":"github_pat_`+strings.Repeat("a", 22)+"_"+strings.Repeat("b", 59)+`"}},
	  {"id":"gl","title":"GitLab","service":"gitlab","hosts":["gitlab.com"],"secret":{"value":"glpat-`+strings.Repeat("c", 20)+`"}},
	  {"id":"do","title":"DO","service":"digitalocean","hosts":["api.digitalocean.com"],"secret":{"value":"dop_v1_`+strings.Repeat("d", 64)+`"}},
	  {"id":"aws","title":"AWS","service":"aws","hosts":["amazonaws.com"],"secret":{"value":"AKIAREALREALREAL1234:`+strings.Repeat("s", 40)+`"}},
	  {"id":"db","title":"DB","service":"postgres","hosts":["db.test"],"secret":{"env":"GUARD_TEST_MISSING"}}]}`), "t", dir)
	if err != nil {
		t.Fatal(err)
	}
	store, err := OpenStore(context.Background(), prof, dir)
	if err != nil {
		t.Fatal(err)
	}
	shapes := map[string]*regexp.Regexp{
		"gh":  regexp.MustCompile(`^ghp_[0-9A-Za-z]{36}$`),
		"pat": regexp.MustCompile(`^github_pat_[0-9A-Za-z]{22}_[0-9A-Za-z]{59}$`),
		"gl":  regexp.MustCompile(`^glpat-[0-9A-Za-z]{20}$`),
		"do":  regexp.MustCompile(`^dop_v1_[0-9a-f]{64}$`),
		"aws": regexp.MustCompile(`^[0-9A-Za-z]{40}$`),
		"db":  regexp.MustCompile(`^[0-9A-Za-z]{40}$`),
	}
	first := map[string]string{}
	for _, c := range store.Credentials() {
		if !shapes[c.ID].MatchString(c.Fake) {
			t.Errorf("%s: fake %q has the wrong shape", c.ID, c.Fake)
		}
		found := false
		for _, tag := range store.Tags {
			found = found || strings.Contains(c.Fake, tag)
		}
		if !found {
			t.Errorf("%s: fake %q carries no tag", c.ID, c.Fake)
		}
		first[c.ID] = c.Fake + c.FakeKeyID
	}
	aws := store.Credentials()[4]
	if !regexp.MustCompile(`^AKIA[0-9A-Z]{16}$`).MatchString(aws.FakeKeyID) || aws.RealKeyID() != "AKIAREALREALREAL1234" {
		t.Errorf("aws: %q %q", aws.FakeKeyID, aws.RealKeyID())
	}
	if _, err := store.Credentials()[5].Real(); err == nil || !strings.Contains(err.Error(), "GUARD_TEST_MISSING") {
		t.Errorf("a missing secret: %v", err)
	}
	if st, err := os.Stat(filepath.Join(dir, SaltFile)); err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("salt: %v %v", st, err)
	}
	// The same install gives the same fakes; another install, others.
	again, _ := OpenStore(context.Background(), prof, dir)
	other, _ := OpenStore(context.Background(), prof, t.TempDir())
	for i, c := range again.Credentials() {
		if first[c.ID] != c.Fake+c.FakeKeyID {
			t.Errorf("%s: the fake changed across opens", c.ID)
		}
		if other.Credentials()[i].Fake == c.Fake {
			t.Errorf("%s: two installs share a fake", c.ID)
		}
	}
}

// TestCommandSecretsAreRefreshed: a command secret with refreshSeconds is
// run again on its interval, and the new value is the one in force.
func TestCommandSecretsAreRefreshed(t *testing.T) {
	dir := t.TempDir()
	src := filepath.Join(dir, "vault")
	os.WriteFile(src, []byte("first-value\n"), 0o600)
	prof, err := Parse([]byte(`{"name":"r","credentials":[{"id":"v","title":"Vault","service":"http","hosts":["vault.test"],
	  "secret":{"command":["cat","`+src+`"],"refreshSeconds":1}}]}`), "t", dir)
	if err != nil {
		t.Fatal(err)
	}
	store, err := OpenStore(context.Background(), prof, dir)
	if err != nil {
		t.Fatal(err)
	}
	c := store.Credentials()[0]
	if v, err := c.Real(); err != nil || v != "first-value" {
		t.Fatalf("first read: %q %v", v, err)
	}
	fake := c.Fake
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	store.Refresh(ctx)
	os.WriteFile(src, []byte("second-value\n"), 0o600)
	deadline := time.Now().Add(5 * time.Second)
	for v, _ := c.Real(); v != "second-value"; v, _ = c.Real() {
		if time.Now().After(deadline) {
			t.Fatalf("still %q after the refresh interval", v)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if c.Fake != fake {
		t.Fatal("the fake changed with the secret")
	}
}
