package proxy

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	neturl "net/url"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"guard/internal/testaws"
)

var (
	realAWS = aws.Credentials{AccessKeyID: "AKIAREALKEY000000001", SecretAccessKey: "realSecretRealSecretRealSecretRealSecret"}
	fakeAWS = aws.Credentials{AccessKeyID: "AKIA" + testTag + "00000000", SecretAccessKey: testTag + "fakeSecretFakeSecretFakeSecret00"}
)

func awsRig(t *testing.T) (*rig, *upstream, *testaws.Stub) {
	w := newWorld(t)
	stub := &testaws.Stub{Real: realAWS}
	up := startUpstream(t, w.pki, "127.0.0.9", "dynamodb.us-east-1.amazonaws.com", stub)
	w.hosts["dynamodb.us-east-1.amazonaws.com"] = "127.0.0.9"
	sw := NewSwapper([]*Credential{{ID: "aws", Title: "AWS", Service: "aws", Hosts: []string{"amazonaws.com"},
		Fake: fakeAWS.SecretAccessKey, FakeKeyID: fakeAWS.AccessKeyID,
		Real: func() (string, error) { return realAWS.SecretAccessKey, nil }, RealKeyID: func() string { return realAWS.AccessKeyID }}},
		[]string{testTag}, discardEvents{}, nil)
	r := startRig(t, rigOptions{rules: "allow web dynamodb.us-east-1.amazonaws.com\ndefault deny\n", hosts: w.hosts,
		upstreamCAs: w.pki.Pool, credentials: sw})
	return r, up, stub
}

func (r *rig) client() *http.Client {
	u, _ := neturl.Parse("http://" + r.explicit)
	return &http.Client{Transport: &http.Transport{Proxy: http.ProxyURL(u), TLSClientConfig: &tls.Config{RootCAs: r.caPool}}}
}

// TestAWSResignedWithTheRealKey: aws-sdk-go-v2, given only the fake key,
// talks to an endpoint that accepts only the real one; a request signed
// with another secret is refused by guard.
func TestAWSResignedWithTheRealKey(t *testing.T) {
	r, up, _ := awsRig(t)
	endpoint := fmt.Sprintf("https://dynamodb.us-east-1.amazonaws.com:%d", up.addr.Port())
	ddb := dynamodb.New(dynamodb.Options{Region: "us-east-1", RetryMaxAttempts: 1, BaseEndpoint: aws.String(endpoint),
		Credentials: credentials.NewStaticCredentialsProvider(fakeAWS.AccessKeyID, fakeAWS.SecretAccessKey, ""), HTTPClient: r.client()})
	out, err := ddb.ListTables(context.Background(), &dynamodb.ListTablesInput{})
	if err != nil || len(out.TableNames) != 2 || out.TableNames[1] != "signed-by-"+fakeAWS.AccessKeyID {
		t.Fatalf("ListTables through guard: %v", err)
	}
	// Signed with a secret that is not the fake: refused before AWS.
	wrong := dynamodb.New(dynamodb.Options{Region: "us-east-1", RetryMaxAttempts: 1, BaseEndpoint: aws.String(endpoint),
		Credentials: credentials.NewStaticCredentialsProvider(fakeAWS.AccessKeyID, "wrongwrongwrongwrongwrongwrongwrongwrong", ""), HTTPClient: r.client()})
	if _, err := wrong.ListTables(context.Background(), &dynamodb.ListTablesInput{}); err == nil || !strings.Contains(err.Error(), "not made with this workspace's fake secret") {
		t.Fatalf("a request signed with another secret: %v", err)
	}
	// Unsigned payload.
	req, _ := http.NewRequest("PUT", endpoint+"/bucket/key", strings.NewReader("object"))
	req.Header.Set("X-Amz-Content-Sha256", unsignedPayload)
	v4.NewSigner().SignHTTP(context.Background(), fakeAWS, req, unsignedPayload, "dynamodb", "us-east-1", time.Now())
	resp, err := r.client().Do(req)
	if err != nil || resp.StatusCode != 200 {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("unsigned payload: %v %s", err, b)
	}
	resp.Body.Close()
}

// chunkedBody is an aws-chunked body of total bytes in 64 KiB chunks,
// signed with the fake key's chain from seed, made as it is read.
func chunkedBody(seed []byte, at time.Time, total int) io.Reader {
	pr, pw := io.Pipe()
	go func() {
		ss := v4.NewStreamSigner(fakeAWS, "s3", "us-east-1", seed)
		chunk := bytes.Repeat([]byte("x"), 64<<10)
		for sent := 0; ; {
			n := min(len(chunk), total-sent)
			sig, _ := ss.GetSignature(context.Background(), nil, chunk[:n], at)
			fmt.Fprintf(pw, "%x;chunk-signature=%s\r\n", n, hex.EncodeToString(sig))
			pw.Write(chunk[:n])
			io.WriteString(pw, "\r\n")
			sent += n
			if n == 0 {
				break
			}
		}
		pw.Close()
	}()
	return pr
}

func chunkedLength(total int) int64 {
	n := int64(0)
	for sent := 0; ; {
		k := min(64<<10, total-sent)
		n += int64(len(fmt.Sprintf("%x;chunk-signature=", k)) + 64 + 2 + k + 2)
		sent += k
		if k == 0 {
			return n
		}
	}
}

// TestStreamingUploadResignedChunkByChunk sends 100 MB signed with
// STREAMING-AWS4-HMAC-SHA256-PAYLOAD: guard re-signs every chunk with the
// real key as it flows, and its heap does not grow with the object.
func TestStreamingUploadResignedChunkByChunk(t *testing.T) {
	r, up, stub := awsRig(t)
	const total = 100 << 20
	at := time.Now().UTC()
	endpoint := fmt.Sprintf("https://dynamodb.us-east-1.amazonaws.com:%d/bucket/big", up.addr.Port())
	req, _ := http.NewRequest("PUT", endpoint, nil)
	req.Header.Set("X-Amz-Content-Sha256", streamingSigned)
	req.Header.Set("Content-Encoding", "aws-chunked")
	req.Header.Set("X-Amz-Decoded-Content-Length", strconv.Itoa(total))
	req.ContentLength = chunkedLength(total)
	v4.NewSigner(func(o *v4.SignerOptions) { o.DisableURIPathEscaping = true }).SignHTTP(context.Background(), fakeAWS, req, streamingSigned, "s3", "us-east-1", at)
	seedSig, _ := parseSigV4(req.Header.Get("Authorization"))
	seed, _ := hex.DecodeString(seedSig.signature)
	req.Body = io.NopCloser(chunkedBody(seed, at, total))

	runtime.GC()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	resp, err := r.client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	runtime.ReadMemStats(&after)
	if resp.StatusCode != 200 || stub.Bytes.Load() != total {
		t.Fatalf("%d after %d bytes: %s", resp.StatusCode, stub.Bytes.Load(), b)
	}
	if grew := int64(after.HeapInuse) - int64(before.HeapInuse); grew > 32<<20 {
		t.Fatalf("the heap grew by %d MiB for a 100 MiB upload", grew>>20)
	}
	t.Logf("100 MiB streamed and re-signed; heap in use %d -> %d MiB", before.HeapInuse>>20, after.HeapInuse>>20)
}

// FuzzSigV4 feeds arbitrary Authorization headers and aws-chunked bodies:
// no panic, and a body that does not check out against the fake chain is
// refused rather than passed on.
func FuzzSigV4(f *testing.F) {
	f.Add("AWS4-HMAC-SHA256 Credential=AKIAX/20261130/us-east-1/s3/aws4_request, SignedHeaders=host;x-amz-date, Signature="+strings.Repeat("0", 64),
		[]byte("10000;chunk-signature="+strings.Repeat("a", 64)+"\r\nxx\r\n0;chunk-signature="+strings.Repeat("b", 64)+"\r\n\r\n"))
	f.Add("AWS4-HMAC-SHA256 Credential=bad", []byte("zz;chunk-signature=\r\n"))
	f.Fuzz(func(t *testing.T, auth string, body []byte) {
		parseSigV4(auth)
		seed := make([]byte, 32)
		c := &chunkResigner{r: bufio.NewReader(bytes.NewReader(body)), body: io.NopCloser(nil),
			fake: v4.NewStreamSigner(fakeAWS, "s3", "us-east-1", seed), real: v4.NewStreamSigner(realAWS, "s3", "us-east-1", seed),
			at: time.Unix(0, 0), ctx: context.Background()}
		out, err := io.ReadAll(c)
		if err == nil && len(body) > 0 && bytes.Contains(out, []byte("chunk-signature=")) {
			// Anything passed on was re-signed, so it checked out against
			// the fake chain: random bytes never do.
			t.Fatalf("an unverified chunk passed: %q", out)
		}
	})
}
