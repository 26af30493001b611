package workspace

import (
	"bytes"
	"context"
	"crypto/hkdf"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"errors"
	"fmt"
	"math/big"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"
)

// SaltFile is the per-install secret the fakes are derived from, 0600 in
// the state dir. Losing it changes every fake; it never leaves the host.
const SaltFile = "credential-salt"

// Store is the workspace's credentials: for each, the fake the VM holds
// and the real secret, which never leaves the host. Fakes are derived from
// a per-install salt, so they stay the same across restarts, and every
// fake carries the install's tag at a fixed place, so one substring search
// finds any of them in a request.
type Store struct {
	creds []*StoredCredential
	// Tags are the install's markers, one per alphabet: any fake contains
	// one of them.
	Tags []string
}

// StoredCredential is one credential with its fake.
type StoredCredential struct {
	ID, Title, Service string
	Hosts              []string
	Headers            []string
	AskBeforeUse       bool
	// Fake is what the VM holds. For AWS it is the secret access key, and
	// FakeKeyID the access key id.
	Fake      string
	FakeKeyID string

	source Secret
	dir    string // for relative secret files

	mu      sync.RWMutex
	real    string // for AWS the secret access key; RealKeyID the key id
	realKey string
	cert    *tls.Certificate // when the secret is a PEM certificate and key
	err     error
}

// IsClientCert says the credential's secret is a client certificate (with
// its key, PEM): the proxy presents it upstream instead of a header.
func (c *StoredCredential) IsClientCert() bool {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return c.cert != nil
}

// ClientCert returns the client certificate, or why there is none.
func (c *StoredCredential) ClientCert() (*tls.Certificate, error) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	if c.err != nil {
		return nil, c.err
	}
	if c.cert == nil {
		return nil, fmt.Errorf("credential %q is not a client certificate", c.ID)
	}
	return c.cert, nil
}

// Real returns the real secret, or why it is not available.
func (c *StoredCredential) Real() (string, error) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return c.real, c.err
}

// RealKeyID is the real AWS access key id.
func (c *StoredCredential) RealKeyID() string {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return c.realKey
}

// Credentials returns the store's credentials.
func (s *Store) Credentials() []*StoredCredential { return s.creds }

// OpenStore loads the profile's credentials and derives their fakes with
// the salt in stateDir (created on first use). A secret that cannot be
// read is kept as an error on its credential, not a failure: the fake is
// still issued, and requests that need the real one are refused.
func OpenStore(ctx context.Context, p *Profile, stateDir string) (*Store, error) {
	salt, err := loadSalt(filepath.Join(stateDir, SaltFile))
	if err != nil {
		return nil, err
	}
	s := &Store{Tags: []string{tag(salt, alphabet62), tag(salt, alphabetHex), tag(salt, alphabetUpper)}}
	for _, c := range p.Credentials {
		sc := &StoredCredential{ID: c.ID, Title: c.Title, Service: c.Service, Hosts: c.Hosts, Headers: c.Headers,
			AskBeforeUse: c.AskBeforeUse, source: c.Secret, dir: p.dir}
		sc.load(ctx)
		real, _ := sc.Real()
		sc.Fake, sc.FakeKeyID = fakeFor(salt, s.Tags, c.ID, c.Service, real)
		s.creds = append(s.creds, sc)
	}
	return s, nil
}

// Refresh re-reads command secrets that ask for it, until ctx ends.
func (s *Store) Refresh(ctx context.Context) {
	for _, c := range s.creds {
		if c.source.RefreshSeconds <= 0 {
			continue
		}
		go func() {
			t := time.NewTicker(time.Duration(c.source.RefreshSeconds) * time.Second)
			defer t.Stop()
			for {
				select {
				case <-ctx.Done():
					return
				case <-t.C:
					c.load(ctx)
				}
			}
		}()
	}
}

func (c *StoredCredential) load(ctx context.Context) {
	v, err := c.read(ctx)
	v = strings.TrimSpace(v)
	if err == nil && v == "" {
		err = errors.New("the secret is empty")
	}
	var key string
	if err == nil && c.Service == "aws" {
		// An AWS secret is "ACCESS_KEY_ID:SECRET_ACCESS_KEY".
		var ok bool
		if key, v, ok = strings.Cut(v, ":"); !ok || key == "" || v == "" {
			err = errors.New("an aws secret must be ACCESS_KEY_ID:SECRET_ACCESS_KEY")
		}
	}
	var cert *tls.Certificate
	if err == nil && strings.Contains(v, "-----BEGIN CERTIFICATE-----") {
		// A client certificate and its key, PEM, as a kubeconfig's
		// client-certificate-data and client-key-data decode to.
		pair, perr := tls.X509KeyPair([]byte(v), []byte(v))
		if perr != nil {
			err = fmt.Errorf("a PEM secret that is not a certificate with its key: %w", perr)
		} else {
			cert = &pair
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if err != nil {
		c.err = fmt.Errorf("credential %q: %w", c.ID, err)
		return
	}
	c.real, c.realKey, c.cert, c.err = v, key, cert, nil
}

func (c *StoredCredential) read(ctx context.Context) (string, error) {
	s := c.source
	switch {
	case s.Value != "":
		return s.Value, nil
	case s.Env != "":
		v, ok := os.LookupEnv(s.Env)
		if !ok {
			return "", fmt.Errorf("$%s is not set", s.Env)
		}
		return v, nil
	case s.File != "":
		path := s.File
		if !filepath.IsAbs(path) {
			path = filepath.Join(c.dir, path)
		}
		b, err := readLimited(path, 64<<10)
		return string(b), err
	case len(s.Command) > 0:
		ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		cmd := exec.CommandContext(ctx, s.Command[0], s.Command[1:]...)
		var out bytes.Buffer
		cmd.Stdout = &out
		if err := cmd.Run(); err != nil {
			return "", fmt.Errorf("%s: %w", s.Command[0], err)
		}
		return out.String(), nil
	}
	return "", errors.New("no secret source")
}

func loadSalt(path string) ([]byte, error) {
	b, err := os.ReadFile(path)
	if err == nil && len(b) == 32 {
		return b, nil
	}
	if err != nil && !os.IsNotExist(err) {
		return nil, fmt.Errorf("credential salt: %w", err)
	}
	b = make([]byte, 32)
	rand.Read(b)
	if err := os.WriteFile(path, b, 0o600); err != nil {
		return nil, fmt.Errorf("credential salt: %w", err)
	}
	return b, nil
}

const (
	alphabet62    = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
	alphabetHex   = "0123456789abcdef"
	alphabetUpper = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZ"
	tagLen        = 8
)

// derive spells n characters of alphabet from HKDF over the salt.
func derive(salt []byte, info, alphabet string, n int) string {
	key, _ := hkdf.Key(sha256.New, salt, nil, info, 64)
	x := new(big.Int).SetBytes(key)
	base := big.NewInt(int64(len(alphabet)))
	out := make([]byte, n)
	var m big.Int
	for i := range out {
		x.DivMod(x, base, &m)
		out[i] = alphabet[m.Int64()]
	}
	return string(out)
}

func tag(salt []byte, alphabet string) string {
	return derive(salt, "guard tag "+alphabet, alphabet, tagLen)
}

// fakeFor makes a credential's fake in the shape of its kind: the real
// value's prefix when it has a known one, else the service's usual one.
// Each fake starts, after its prefix, with the install's tag for its
// alphabet.
func fakeFor(salt []byte, tags []string, id, service, real string) (fake, keyID string) {
	body := func(alphabet string, n int) string {
		t := tags[0]
		switch alphabet {
		case alphabetHex:
			t = tags[1]
		case alphabetUpper:
			t = tags[2]
		}
		return t + derive(salt, "guard fake "+id+" "+alphabet, alphabet, n-tagLen)
	}
	switch {
	case service == "aws":
		return body(alphabet62, 40), "AKIA" + body(alphabetUpper, 16)
	case strings.HasPrefix(real, "github_pat_"):
		return "github_pat_" + body(alphabet62, 22) + "_" + derive(salt, "guard fake2 "+id, alphabet62, 59), ""
	case strings.HasPrefix(real, "glpat-") || (real == "" && service == "gitlab"):
		return "glpat-" + body(alphabet62, 20), ""
	case strings.HasPrefix(real, "dop_v1_") || (real == "" && service == "digitalocean"):
		return "dop_v1_" + body(alphabetHex, 64), ""
	case strings.HasPrefix(real, "ghp_") || service == "github":
		return "ghp_" + body(alphabet62, 36), ""
	}
	return body(alphabet62, 40), ""
}
