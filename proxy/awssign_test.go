package proxy

import (
	"bufio"
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"crypto/tls"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	neturl "net/url"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
)

var (
	realAWS = aws.Credentials{AccessKeyID: "AKIAREALKEY000000001", SecretAccessKey: "realSecretRealSecretRealSecretRealSecret"}
	fakeAWS = aws.Credentials{AccessKeyID: "AKIA" + testTag + "00000000", SecretAccessKey: testTag + "fakeSecretFakeSecretFakeSecret00"}
)

// awsStub is an AWS endpoint that accepts only requests signed with the
// real key, as AWS would; it checks an aws-chunked body chunk by chunk.
type awsStub struct {
	bytes atomic.Int64
}

func (s *awsStub) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	sig, err := parseSigV4(r.Header.Get("Authorization"))
	if err != nil || sig.keyID != realAWS.AccessKeyID {
		http.Error(w, fmt.Sprintf("not the real key: %v %q", err, r.Header.Get("Authorization")), 403)
		return
	}
	at, _ := time.Parse("20060102T150405Z", r.Header.Get("X-Amz-Date"))
	payload := r.Header.Get("X-Amz-Content-Sha256")
	if payload == "" {
		b, _ := io.ReadAll(r.Body)
		sum := sha256.Sum256(b)
		payload = hex.EncodeToString(sum[:])
		r.Body = io.NopCloser(bytes.NewReader(b))
	}
	// The stub's own check: the SDK's signer with the real key, over the
	// headers the request says it signed.
	c := &http.Request{Method: r.Method, URL: &neturl.URL{Scheme: "https", Host: r.Host, Path: r.URL.Path, RawPath: r.URL.RawPath, RawQuery: r.URL.RawQuery},
		Host: r.Host, Header: http.Header{}}
	for _, h := range sig.signed {
		if h == "content-length" {
			c.ContentLength = r.ContentLength
		} else if h != "host" {
			c.Header[http.CanonicalHeaderKey(h)] = r.Header.Values(h)
		}
	}
	v4.NewSigner(func(o *v4.SignerOptions) { o.DisableURIPathEscaping = sig.service == "s3" }).SignHTTP(r.Context(), realAWS, c, payload, sig.service, sig.region, at)
	want, _ := parseSigV4(c.Header.Get("Authorization"))
	if !hmac.Equal([]byte(want.signature), []byte(sig.signature)) {
		http.Error(w, "SignatureDoesNotMatch", 403)
		return
	}
	if payload == streamingSigned {
		seed, _ := hex.DecodeString(sig.signature)
		ss := v4.NewStreamSigner(realAWS, sig.service, sig.region, seed)
		br := bufio.NewReader(r.Body)
		for {
			line, err := br.ReadString('\n')
			if err != nil {
				http.Error(w, "short body", 400)
				return
			}
			sizeHex, ext, _ := strings.Cut(strings.TrimSpace(line), ";")
			size, _ := strconv.ParseInt(sizeHex, 16, 64)
			data := make([]byte, size+2)
			io.ReadFull(br, data)
			exp, _ := ss.GetSignature(r.Context(), nil, data[:size], at)
			if strings.TrimPrefix(ext, "chunk-signature=") != hex.EncodeToString(exp) {
				http.Error(w, "a chunk signature does not match the real key", 403)
				return
			}
			s.bytes.Add(size)
			if size == 0 {
				break
			}
		}
	} else {
		n, _ := io.Copy(io.Discard, r.Body)
		s.bytes.Add(n)
	}
	w.Header().Set("Content-Type", "application/x-amz-json-1.0")
	io.WriteString(w, `{"TableNames":["orders"],"echo":"`+r.Header.Get("Authorization")[:40]+`"}`)
}

func awsRig(t *testing.T) (*rig, *upstream, *awsStub) {
	w := newWorld(t)
	stub := &awsStub{}
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
	if err != nil || len(out.TableNames) != 1 {
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
	if resp.StatusCode != 200 || stub.bytes.Load() != total {
		t.Fatalf("%d after %d bytes: %s", resp.StatusCode, stub.bytes.Load(), b)
	}
	if grew := int64(after.HeapInuse) - int64(before.HeapInuse); grew > 32<<20 {
		t.Fatalf("the heap grew by %d MiB for a 100 MiB upload", grew>>20)
	}
	t.Logf("100 MiB streamed and re-signed; heap in use %d -> %d MiB", before.HeapInuse>>20, after.HeapInuse>>20)
}
