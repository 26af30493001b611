package proxy

import (
	"crypto/x509"
	"os"
	"path/filepath"
	"testing"
	"time"
)

func TestCAIsCreatedOnceAndKeptPrivate(t *testing.T) {
	dir := t.TempDir()
	now := func() time.Time { return time.Date(2026, 11, 30, 0, 0, 0, 0, time.UTC) }
	a, err := LoadOrCreateCA(dir, "ws", 2, now)
	if err != nil {
		t.Fatal(err)
	}
	st, err := os.Stat(filepath.Join(dir, CAKeyFile))
	if err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("CA key mode: %v %v", st.Mode(), err)
	}
	ca := a.Certificate()
	if !ca.IsCA || ca.NotAfter.Sub(now()) < 9*365*24*time.Hour || ca.PublicKeyAlgorithm != x509.ECDSA {
		t.Fatalf("CA: IsCA %v, until %v, %v", ca.IsCA, ca.NotAfter, ca.PublicKeyAlgorithm)
	}
	b, err := LoadOrCreateCA(dir, "ws", 2, now)
	if err != nil || !b.Certificate().Equal(ca) {
		t.Fatal("the CA changed on the second run")
	}

	pool := x509.NewCertPool()
	pool.AddCert(ca)
	for _, name := range []string{"api.example.test", "192.0.2.7"} {
		leaf, err := a.Leaf(name)
		if err != nil {
			t.Fatal(err)
		}
		opts := x509.VerifyOptions{Roots: pool, DNSName: name, CurrentTime: now()}
		if _, err := leaf.Leaf.Verify(opts); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if leaf.Leaf.NotBefore != now().Add(-24*time.Hour) || leaf.Leaf.NotAfter != now().AddDate(1, 0, 0) {
			t.Fatalf("%s: valid %v to %v", name, leaf.Leaf.NotBefore, leaf.Leaf.NotAfter)
		}
	}
	// One key for every leaf; a repeat host is served from the cache.
	l1, _ := a.Leaf("api.example.test")
	l2, _ := a.Leaf("api.example.test")
	l3, _ := a.Leaf("other.example.test")
	if l1 != l2 || l1.PrivateKey != l3.PrivateKey {
		t.Fatal("repeat host re-signed, or leaves use different keys")
	}
	// The cache is bounded (2 here): the oldest leaf went.
	if a.CachedLeaves() != 2 {
		t.Fatalf("cache holds %d", a.CachedLeaves())
	}
	if l4, _ := a.Leaf("192.0.2.7"); l4 == nil {
		t.Fatal("evicted leaf not re-made")
	}
}

func TestCARefusesHalfAPair(t *testing.T) {
	dir := t.TempDir()
	if _, err := LoadOrCreateCA(dir, "ws", 0, nil); err != nil {
		t.Fatal(err)
	}
	os.Remove(filepath.Join(dir, CAKeyFile))
	if _, err := LoadOrCreateCA(dir, "ws", 0, nil); err == nil {
		t.Fatal("loaded a CA without its key")
	}
}
