package proxy

import (
	"crypto/tls"
	"fmt"
	"io"
	"net/http"
	neturl "net/url"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/crane"
	"github.com/google/go-containerregistry/pkg/v1/random"

	"guard/internal/testregistry"
)

// TestCranePushPullThroughProxy pushes and pulls an image with crane's
// library against a real distribution registry, through the explicit
// proxy; a web rule then refuses the manifest DELETE.
func TestCranePushPullThroughProxy(t *testing.T) {
	w := newWorld(t)
	reg := startUpstream(t, w.pki, "127.0.0.8", "registry.example.test", testregistry.New())
	w.hosts["registry.example.test"] = "127.0.0.8"
	r := w.rig(t, "deny web registry.example.test DELETE\nallow tcp registry.example.test\ndefault deny\n")

	proxyURL, _ := neturl.Parse("http://" + r.explicit)
	tr := &http.Transport{Proxy: http.ProxyURL(proxyURL), TLSClientConfig: &tls.Config{RootCAs: r.caPool}}
	opt := crane.WithTransport(tr)
	ref := fmt.Sprintf("registry.example.test:%d/team/app/tool:v1", reg.addr.Port())

	img, err := random.Image(1<<20, 3)
	if err != nil {
		t.Fatal(err)
	}
	if err := crane.Push(img, ref, opt); err != nil {
		t.Fatalf("push: %v", err)
	}
	pulled, err := crane.Pull(ref, opt)
	if err != nil {
		t.Fatalf("pull: %v", err)
	}
	want, _ := img.Digest()
	got, err := pulled.Digest()
	if err != nil || got != want {
		t.Fatalf("pulled %v, pushed %v (%v)", got, want, err)
	}
	layers, _ := pulled.Layers()
	for _, l := range layers {
		rc, err := l.Compressed()
		if err != nil {
			t.Fatal(err)
		}
		if _, err := io.Copy(io.Discard, rc); err != nil {
			t.Fatalf("layer: %v", err)
		}
		rc.Close()
	}
	err = crane.Delete(fmt.Sprintf("registry.example.test:%d/team/app/tool@%s", reg.addr.Port(), want), opt)
	if err == nil || !strings.Contains(err.Error(), "403") {
		t.Fatalf("manifest DELETE not refused: %v", err)
	}
	if _, err := crane.Pull(ref, opt); err != nil {
		t.Fatalf("image gone after a refused delete: %v", err)
	}
}
