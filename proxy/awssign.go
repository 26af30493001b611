package proxy

import (
	"bufio"
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	neturl "net/url"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
)

// SigV4 payload hashes that are not a hash.
const (
	unsignedPayload       = "UNSIGNED-PAYLOAD"
	streamingSigned       = "STREAMING-AWS4-HMAC-SHA256-PAYLOAD"
	streamingSignedTrail  = "STREAMING-AWS4-HMAC-SHA256-PAYLOAD-TRAILER"
	streamingUnsignedTrlr = "STREAMING-UNSIGNED-PAYLOAD-TRAILER"
	// maxSignedChunk bounds one aws-chunked chunk, which is held whole to
	// check and sign it; SDKs send 64 KiB to 8 MiB.
	maxSignedChunk = 16 << 20
	// maxHashedBody bounds a body whose hash guard must compute itself
	// (no X-Amz-Content-Sha256); such bodies are API calls, not uploads.
	maxHashedBody = 16 << 20
)

// sigv4 is a parsed SigV4 Authorization header.
type sigv4 struct {
	keyID, date, region, service string
	signed                       []string
	signature                    string
}

func parseSigV4(auth string) (sigv4, error) {
	var s sigv4
	alg, rest, ok := strings.Cut(auth, " ")
	if !ok || alg != "AWS4-HMAC-SHA256" {
		return s, fmt.Errorf("the request is signed with %q, which guard does not re-sign (only AWS4-HMAC-SHA256)", alg)
	}
	for _, part := range strings.Split(rest, ",") {
		k, v, _ := strings.Cut(strings.TrimSpace(part), "=")
		switch k {
		case "Credential":
			scope := strings.Split(v, "/")
			if len(scope) != 5 || scope[4] != "aws4_request" {
				return s, errors.New("a malformed SigV4 credential scope")
			}
			s.keyID, s.date, s.region, s.service = scope[0], scope[1], scope[2], scope[3]
		case "SignedHeaders":
			s.signed = strings.Split(v, ";")
		case "Signature":
			s.signature = v
		}
	}
	if s.keyID == "" || len(s.signed) == 0 || len(s.signature) != 64 {
		return s, errors.New("a malformed SigV4 Authorization header")
	}
	return s, nil
}

// signedClone is the request as the client signed it: its method, URL
// and only the headers it signed, for the SDK's signer to sign again.
func signedClone(r *http.Request, signed []string) *http.Request {
	u := &neturl.URL{Scheme: "https", Host: r.Host, Path: r.URL.Path, RawPath: r.URL.RawPath, RawQuery: r.URL.RawQuery}
	c := &http.Request{Method: r.Method, URL: u, Host: r.Host, Header: http.Header{}, Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1}
	for _, h := range signed {
		switch h {
		case "host":
		case "content-length":
			c.ContentLength = r.ContentLength
		default:
			if v := r.Header.Values(h); v != nil {
				c.Header[http.CanonicalHeaderKey(h)] = v
			}
		}
	}
	return c
}

// signature signs the clone with creds and returns the Authorization
// header's signature.
func signature(ctx context.Context, r *http.Request, sig sigv4, creds aws.Credentials, payloadHash string, at time.Time) (string, string, error) {
	c := signedClone(r, sig.signed)
	err := v4.NewSigner(func(o *v4.SignerOptions) {
		o.DisableURIPathEscaping = sig.service == "s3" || sig.service == "s3express"
	}).SignHTTP(ctx, creds, c, payloadHash, sig.service, sig.region, at)
	if err != nil {
		return "", "", err
	}
	auth := c.Header.Get("Authorization")
	mine, err := parseSigV4(auth)
	if err != nil {
		return "", "", err
	}
	if strings.Join(mine.signed, ";") != strings.Join(sig.signed, ";") {
		return "", "", fmt.Errorf("the request signs headers (%s) that guard cannot sign the same way (%s)",
			strings.Join(sig.signed, ";"), strings.Join(mine.signed, ";"))
	}
	return mine.signature, auth, nil
}

// resignAWS checks that a request was signed with the credential's fake
// secret, then signs it again with the real key, in place. A streaming
// (aws-chunked) body has each chunk's signature checked and re-signed as
// it flows, without holding more than one chunk.
func resignAWS(ctx context.Context, r *http.Request, c *Credential) error {
	sig, err := parseSigV4(r.Header.Get("Authorization"))
	if err != nil {
		return err
	}
	if sig.keyID != c.FakeKeyID {
		return errors.New("the request is signed with another access key")
	}
	at, err := time.Parse("20060102T150405Z", r.Header.Get("X-Amz-Date"))
	if err != nil {
		return errors.New("the request has no valid X-Amz-Date")
	}
	realSecret, err := c.Real()
	if err != nil {
		return err
	}
	realKey := ""
	if c.RealKeyID != nil {
		realKey = c.RealKeyID()
	}
	fake := aws.Credentials{AccessKeyID: c.FakeKeyID, SecretAccessKey: c.Fake}
	real := aws.Credentials{AccessKeyID: realKey, SecretAccessKey: realSecret}
	payload := r.Header.Get("X-Amz-Content-Sha256")
	switch {
	case payload == streamingSignedTrail:
		return errors.New("signed trailers (STREAMING-AWS4-HMAC-SHA256-PAYLOAD-TRAILER) are not re-signed yet; use unsigned trailers or a plain payload hash")
	case payload == "":
		// Services other than S3 may leave the hash out: compute it.
		body, err := io.ReadAll(io.LimitReader(r.Body, maxHashedBody+1))
		if err != nil || len(body) > maxHashedBody {
			return errors.New("a body without X-Amz-Content-Sha256 that is too large or unreadable to hash")
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
		sum := sha256.Sum256(body)
		payload = hex.EncodeToString(sum[:])
	}
	want, _, err := signature(ctx, r, sig, fake, payload, at)
	if err != nil {
		return err
	}
	if !hmac.Equal([]byte(want), []byte(sig.signature)) {
		return errors.New("the request's signature was not made with this workspace's fake secret")
	}
	realSig, auth, err := signature(ctx, r, sig, real, payload, at)
	if err != nil {
		return err
	}
	r.Header.Set("Authorization", auth)
	if payload == streamingSigned {
		fakeSeed, _ := hex.DecodeString(sig.signature)
		realSeed, _ := hex.DecodeString(realSig)
		r.Body = &chunkResigner{
			r:    bufio.NewReaderSize(r.Body, 64<<10),
			body: r.Body,
			fake: v4.NewStreamSigner(fake, sig.service, sig.region, fakeSeed),
			real: v4.NewStreamSigner(real, sig.service, sig.region, realSeed),
			at:   at, ctx: ctx,
		}
	}
	return nil
}

// chunkResigner passes an aws-chunked body through, checking each chunk's
// signature against the fake key's chain and replacing it with the real
// key's. Signatures have the same length, so the body's length holds.
type chunkResigner struct {
	r          *bufio.Reader
	body       io.Closer
	fake, real *v4.StreamSigner
	at         time.Time
	ctx        context.Context
	out        []byte
	done       bool
	err        error
}

var errChunk = errors.New("an aws-chunked body that does not check out against the fake key")

func (c *chunkResigner) Read(p []byte) (int, error) {
	for len(c.out) == 0 {
		if c.err != nil {
			return 0, c.err
		}
		if c.done {
			// Whatever follows the final chunk (trailers) passes as is.
			return c.r.Read(p)
		}
		c.err = c.next()
	}
	n := copy(p, c.out)
	c.out = c.out[n:]
	return n, nil
}

// next reads, checks and re-signs one chunk.
func (c *chunkResigner) next() error {
	line, err := c.r.ReadString('\n')
	if err != nil {
		return fmt.Errorf("%w: %v", errChunk, err)
	}
	head := strings.TrimRight(line, "\r\n")
	sizeHex, ext, _ := strings.Cut(head, ";")
	sigHex, ok := strings.CutPrefix(ext, "chunk-signature=")
	size, perr := strconv.ParseInt(sizeHex, 16, 64)
	if !ok || perr != nil || size < 0 || size > maxSignedChunk || len(sigHex) != 64 {
		return fmt.Errorf("%w: chunk header %q", errChunk, head)
	}
	data := make([]byte, size+2)
	if _, err := io.ReadFull(c.r, data); err != nil || !bytes.HasSuffix(data, []byte("\r\n")) {
		return fmt.Errorf("%w: a short chunk", errChunk)
	}
	data = data[:size]
	want, err := c.fake.GetSignature(c.ctx, nil, data, c.at)
	if err != nil {
		return err
	}
	if !hmac.Equal([]byte(hex.EncodeToString(want)), []byte(sigHex)) {
		return errChunk
	}
	realSig, err := c.real.GetSignature(c.ctx, nil, data, c.at)
	if err != nil {
		return err
	}
	var b bytes.Buffer
	fmt.Fprintf(&b, "%s;chunk-signature=%s\r\n", sizeHex, hex.EncodeToString(realSig))
	b.Write(data)
	b.WriteString("\r\n")
	c.out = b.Bytes()
	c.done = size == 0
	return nil
}

func (c *chunkResigner) Close() error { return c.body.Close() }
