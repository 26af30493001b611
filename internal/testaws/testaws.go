// Package testaws is an AWS endpoint for tests that accepts only requests
// signed with one real key, as AWS does: the SDK's own v4 signer checks
// each request, and an aws-chunked body chunk by chunk.
package testaws

import (
	"bufio"
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
)

// Stub is the endpoint. Bytes counts the payload bytes it accepted.
type Stub struct {
	Real  aws.Credentials
	Bytes atomic.Int64
}

type auth struct {
	keyID, region, service, signature string
	signed                            []string
}

func parse(h string) (auth, bool) {
	var a auth
	_, rest, _ := strings.Cut(h, " ")
	for _, part := range strings.Split(rest, ",") {
		k, v, _ := strings.Cut(strings.TrimSpace(part), "=")
		switch k {
		case "Credential":
			s := strings.Split(v, "/")
			if len(s) == 5 {
				a.keyID, a.region, a.service = s[0], s[2], s[3]
			}
		case "SignedHeaders":
			a.signed = strings.Split(v, ";")
		case "Signature":
			a.signature = v
		}
	}
	return a, a.keyID != ""
}

func (s *Stub) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	a, ok := parse(r.Header.Get("Authorization"))
	if !ok || a.keyID != s.Real.AccessKeyID {
		s.deny(w, "InvalidClientTokenId", "not the real key")
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
	c := &http.Request{Method: r.Method, URL: &url.URL{Scheme: "https", Host: r.Host, Path: r.URL.Path, RawPath: r.URL.RawPath, RawQuery: r.URL.RawQuery},
		Host: r.Host, Header: http.Header{}}
	for _, h := range a.signed {
		if h == "content-length" {
			c.ContentLength = r.ContentLength
		} else if h != "host" {
			c.Header[http.CanonicalHeaderKey(h)] = r.Header.Values(h)
		}
	}
	v4.NewSigner(func(o *v4.SignerOptions) { o.DisableURIPathEscaping = a.service == "s3" }).SignHTTP(r.Context(), s.Real, c, payload, a.service, a.region, at)
	want, _ := parse(c.Header.Get("Authorization"))
	if !hmac.Equal([]byte(want.signature), []byte(a.signature)) {
		s.deny(w, "SignatureDoesNotMatch", "the signature does not match the real key")
		return
	}
	if payload == "STREAMING-AWS4-HMAC-SHA256-PAYLOAD" {
		seed, _ := hex.DecodeString(a.signature)
		ss := v4.NewStreamSigner(s.Real, a.service, a.region, seed)
		br := bufio.NewReader(r.Body)
		for {
			line, err := br.ReadString('\n')
			if err != nil {
				s.deny(w, "IncompleteBody", "short body")
				return
			}
			sizeHex, ext, _ := strings.Cut(strings.TrimSpace(line), ";")
			size, _ := strconv.ParseInt(sizeHex, 16, 64)
			data := make([]byte, size+2)
			io.ReadFull(br, data)
			exp, _ := ss.GetSignature(r.Context(), nil, data[:size], at)
			if strings.TrimPrefix(ext, "chunk-signature=") != hex.EncodeToString(exp) {
				s.deny(w, "SignatureDoesNotMatch", "a chunk signature does not match the real key")
				return
			}
			s.Bytes.Add(size)
			if size == 0 {
				break
			}
		}
	} else {
		n, _ := io.Copy(io.Discard, r.Body)
		s.Bytes.Add(n)
	}
	w.Header().Set("Content-Type", "application/x-amz-json-1.0")
	// Echo the key the request was signed with, as an error page might.
	io.WriteString(w, `{"TableNames":["orders","signed-by-`+a.keyID+`"]}`)
}

func (s *Stub) deny(w http.ResponseWriter, code, message string) {
	w.Header().Set("Content-Type", "application/x-amz-json-1.0")
	w.Header().Set("X-Amzn-ErrorType", code)
	w.WriteHeader(http.StatusForbidden)
	io.WriteString(w, `{"__type":"`+code+`","message":"`+message+`"}`)
}
