package proxy

import (
	"container/list"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net/netip"
	"os"
	"path/filepath"
	"sync"
	"time"
)

// CA file names in the state directory.
const (
	CACertFile = "ca.pem"
	CAKeyFile  = "ca-key.pem"
)

// Authority is the workspace CA: it signs leaf certificates for the hosts
// the proxy intercepts. Its key stays in the state directory (0600).
type Authority struct {
	cert    *x509.Certificate
	certDER []byte
	key     *ecdsa.PrivateKey
	leafKey *ecdsa.PrivateKey // one key for every leaf of this workspace
	now     func() time.Time

	mu    sync.Mutex
	cache map[string]*list.Element // SAN -> *leafEntry
	lru   *list.List
	limit int
}

type leafEntry struct {
	name string
	cert *tls.Certificate
}

// LoadOrCreateCA reads the CA from dir, creating it (ECDSA P-256, valid 10
// years) on first run. cacheSize bounds the leaf cache (0: 1024).
func LoadOrCreateCA(dir, workspace string, cacheSize int, now func() time.Time) (*Authority, error) {
	if now == nil {
		now = time.Now
	}
	if cacheSize <= 0 {
		cacheSize = 1024
	}
	certPath, keyPath := filepath.Join(dir, CACertFile), filepath.Join(dir, CAKeyFile)
	certPEM, certErr := os.ReadFile(certPath)
	keyPEM, keyErr := os.ReadFile(keyPath)
	switch {
	case errors.Is(certErr, os.ErrNotExist) && errors.Is(keyErr, os.ErrNotExist):
		var err error
		if certPEM, keyPEM, err = newCA(workspace, now()); err != nil {
			return nil, err
		}
		if err := os.WriteFile(keyPath, keyPEM, 0o600); err != nil {
			return nil, fmt.Errorf("write CA key: %w", err)
		}
		if err := os.WriteFile(certPath, certPEM, 0o644); err != nil {
			return nil, fmt.Errorf("write CA certificate: %w", err)
		}
	case certErr != nil:
		return nil, fmt.Errorf("CA certificate: %w (remove %s and %s to make a new CA)", certErr, certPath, keyPath)
	case keyErr != nil:
		return nil, fmt.Errorf("CA key: %w (remove %s and %s to make a new CA)", keyErr, certPath, keyPath)
	}
	if st, err := os.Stat(keyPath); err == nil && st.Mode().Perm()&0o077 != 0 {
		if err := os.Chmod(keyPath, 0o600); err != nil {
			return nil, fmt.Errorf("CA key: %w", err)
		}
	}
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return nil, fmt.Errorf("CA in %s: %w", dir, err)
	}
	key, ok := pair.PrivateKey.(*ecdsa.PrivateKey)
	if !ok {
		return nil, fmt.Errorf("CA key in %s is not ECDSA", dir)
	}
	cert, err := x509.ParseCertificate(pair.Certificate[0])
	if err != nil {
		return nil, fmt.Errorf("CA certificate: %w", err)
	}
	leafKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	return &Authority{cert: cert, certDER: pair.Certificate[0], key: key, leafKey: leafKey, now: now,
		cache: map[string]*list.Element{}, lru: list.New(), limit: cacheSize}, nil
}

func newCA(workspace string, now time.Time) (certPEM, keyPEM []byte, err error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return nil, nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: "guard workspace " + workspace, Organization: []string{"guard"}},
		NotBefore:             now.Add(-24 * time.Hour),
		NotAfter:              now.AddDate(10, 0, 0),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, nil, err
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}), nil
}

// Certificate returns the CA certificate.
func (a *Authority) Certificate() *x509.Certificate { return a.cert }

// CertificatePEM returns the CA certificate in PEM, for VM trust stores.
func (a *Authority) CertificatePEM() []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: a.certDER})
}

// Leaf returns a certificate for name (a DNS name or an IP literal), from
// the cache when it holds one: a repeat host costs no signature.
func (a *Authority) Leaf(name string) (*tls.Certificate, error) {
	a.mu.Lock()
	if el, ok := a.cache[name]; ok {
		a.lru.MoveToFront(el)
		c := el.Value.(*leafEntry).cert
		a.mu.Unlock()
		return c, nil
	}
	a.mu.Unlock()

	cert, err := a.sign(name)
	if err != nil {
		return nil, err
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if el, ok := a.cache[name]; ok { // signed twice in a race: keep one
		return el.Value.(*leafEntry).cert, nil
	}
	a.cache[name] = a.lru.PushFront(&leafEntry{name: name, cert: cert})
	for a.lru.Len() > a.limit {
		old := a.lru.Back()
		a.lru.Remove(old)
		delete(a.cache, old.Value.(*leafEntry).name)
	}
	return cert, nil
}

// CachedLeaves is the number of leaves in the cache.
func (a *Authority) CachedLeaves() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.lru.Len()
}

func (a *Authority) sign(name string) (*tls.Certificate, error) {
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return nil, err
	}
	now := a.now()
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: name},
		// Back-dated a day: VM clocks drift.
		NotBefore:   now.Add(-24 * time.Hour),
		NotAfter:    now.AddDate(1, 0, 0),
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	if ip, err := netip.ParseAddr(name); err == nil {
		tmpl.IPAddresses = append(tmpl.IPAddresses, ip.AsSlice())
	} else {
		tmpl.DNSNames = []string{name}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, a.cert, &a.leafKey.PublicKey, a.key)
	if err != nil {
		return nil, fmt.Errorf("sign leaf for %s: %w", name, err)
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	return &tls.Certificate{Certificate: [][]byte{der, a.certDER}, PrivateKey: a.leafKey, Leaf: leaf}, nil
}
