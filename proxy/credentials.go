package proxy

import (
	"bytes"
	"compress/flate"
	"compress/gzip"
	"context"
	"crypto/tls"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net/http"
	neturl "net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"unsafe"

	"guard/audit"
)

// Destination is where an intercepted request goes, as the credential
// hook needs it.
type Destination struct {
	Host string // normalized, no port
	TLS  bool
}

// Credential is one credential as the swapper sees it.
type Credential struct {
	ID, Title, Service string
	Hosts, Headers     []string
	AskBeforeUse       bool
	Fake, FakeKeyID    string
	// Real returns the real secret, or why it is unavailable.
	Real func() (string, error)
	// RealKeyID is the real AWS access key id.
	RealKeyID func() string
	// ClientCert is the real client certificate, when the credential is
	// one (a kubeconfig's client-certificate); nil otherwise.
	ClientCert func() (*tls.Certificate, error)
}

// UseApprover asks a person before a credential marked askBeforeUse is
// used (the consent broker's use questions).
type UseApprover interface {
	ApproveUse(ctx context.Context, c *Credential, operation string) (bool, string)
}

// Swapper is the credential hook: on requests to a credential's hosts over
// TLS it replaces the credential's fake with the real secret in the
// Authorization header (bearer, token and basic forms) and the
// credential's own headers; it refuses, with 451, any request that carries
// a fake anywhere else (another host, the URL of another host, a body),
// and marks the workspace compromised until a person clears it; and it
// turns real secrets that a server reflects back into their fakes.
type Swapper struct {
	creds  []*Credential
	tags   []string
	maxLen int
	// shapes group the fakes by where their tag sits and how long they
	// are, so that a tag found in text is checked with one map lookup per
	// shape rather than against every fake.
	shapes  map[string][]fakeShape
	events  EventSink
	approve UseApprover

	compromised atomic.Pointer[string]

	// BlockUntracked refuses (451) requests that carry a real-looking
	// secret guard did not issue; otherwise they are only flagged.
	BlockUntracked bool
	// OnCompromise is told the reason when the workspace becomes
	// compromised, to keep the mark across restarts.
	OnCompromise func(reason string)

	swapping chan struct{} // a slot per body held for a password swap
}

// NewSwapper builds the hook. tags are the install's fake markers: every
// fake contains one, so one substring search per tag finds them all.
func NewSwapper(creds []*Credential, tags []string, events EventSink, approve UseApprover) *Swapper {
	// The body scanner holds back enough to see a fake, or the head of a
	// real-looking secret, split across reads.
	s := &Swapper{creds: creds, tags: tags, events: events, approve: approve, shapes: map[string][]fakeShape{}, maxLen: 96,
		swapping: make(chan struct{}, maxSwapping)}
	for _, c := range creds {
		s.maxLen = max(s.maxLen, len(c.Fake), len(c.FakeKeyID))
		for _, f := range []string{c.Fake, c.FakeKeyID} {
			for _, tag := range tags {
				off := strings.Index(f, tag)
				if f == "" || off < 0 {
					continue
				}
				shapes := s.shapes[tag]
				i := slices.IndexFunc(shapes, func(sh fakeShape) bool { return sh.offset == off && sh.length == len(f) })
				if i < 0 {
					shapes = append(shapes, fakeShape{offset: off, length: len(f), fakes: map[string]*Credential{}})
					i = len(shapes) - 1
				}
				shapes[i].fakes[f] = c
				s.shapes[tag] = shapes
			}
		}
	}
	return s
}

// fakeShape is the fakes whose tag sits at offset and whose length is
// length.
type fakeShape struct {
	offset, length int
	fakes          map[string]*Credential
}

// Compromised says why the workspace is compromised, or "".
func (s *Swapper) Compromised() string {
	if r := s.compromised.Load(); r != nil {
		return *r
	}
	return ""
}

// ClearCompromise lets requests through again after a person has looked.
func (s *Swapper) ClearCompromise() bool { return s.compromised.Swap(nil) != nil }

// MarkCompromised sets the mark (a restart finds it kept on disk).
func (s *Swapper) MarkCompromised(reason string) { s.compromised.Store(&reason) }

// fakeHit is one fake found in some text.
type fakeHit struct {
	cred *Credential
	fake string
}

// find reports the fakes in text: each occurrence of a tag is looked up
// in the fakes of each shape that carries it.
func (s *Swapper) find(text string) []fakeHit {
	return s.findIn(text, func(text string, tag string, from int) int {
		if i := strings.Index(text[from:], tag); i >= 0 {
			return from + i
		}
		return -1
	})
}

// findBytes is find on bytes, without copying them.
func (s *Swapper) findBytes(b []byte) []fakeHit {
	text := unsafe.String(unsafe.SliceData(b), len(b))
	return s.find(text)
}

func (s *Swapper) findIn(text string, index func(text, tag string, from int) int) []fakeHit {
	var hits []fakeHit
	for _, tag := range s.tags {
		for from := 0; ; {
			at := index(text, tag, from)
			if at < 0 {
				break
			}
			for _, sh := range s.shapes[tag] {
				start := at - sh.offset
				if start < 0 || start+sh.length > len(text) {
					continue
				}
				if c, ok := sh.fakes[text[start:start+sh.length]]; ok {
					hits = append(hits, fakeHit{cred: c, fake: text[start : start+sh.length]})
				}
			}
			from = at + 1
		}
	}
	return hits
}

func inScope(c *Credential, host string) bool {
	for _, h := range c.Hosts {
		if host == h || strings.HasSuffix(host, "."+h) {
			return true
		}
	}
	return false
}

// errCompromise stops a request whose body carries a fake out of scope.
var errCompromise = errors.New("a fake credential in a request to a host it does not belong to")

// compromise marks the workspace and records the event.
func (s *Swapper) compromise(ctx context.Context, c *Credential, host, where string) *Block {
	reason := fmt.Sprintf("the fake of credential %q was sent to %s in the %s; the workspace is marked compromised until `guardctl compromise clear`", c.ID, host, where)
	if s.compromised.CompareAndSwap(nil, &reason) && s.OnCompromise != nil {
		s.OnCompromise(reason)
	}
	s.events.Emit(ctx, audit.Event{Type: audit.TypeCompromise, Host: host, Scope: c.ID, Reason: reason})
	return compromiseBlock(reason)
}

func compromiseBlock(reason string) *Block {
	body := fmt.Sprintf(`{"message":%q}`+"\n", reason+"; blocked by guardrails")
	return &Block{Status: http.StatusUnavailableForLegalReasons, Header: http.Header{"Content-Type": {"application/json"}},
		Body: []byte(body), Reason: reason}
}

// Inject checks and rewrites a request about to go upstream; scrub, when
// not nil, is applied to its response.
func (s *Swapper) Inject(ctx context.Context, r *http.Request, dst Destination) (*Injection, *Block, error) {
	if reason := s.Compromised(); reason != "" {
		return nil, compromiseBlock("the workspace is compromised (" + reason + ")"), nil
	}
	if kind := s.untracked([]byte(r.URL.RequestURI())); kind != "" {
		if blk := s.flagUntracked(ctx, kind, dst.Host, "URL"); blk != nil {
			return nil, blk, nil
		}
	}
	for name, values := range r.Header {
		for _, v := range values {
			text := v
			if scheme, rest, ok := strings.Cut(v, " "); ok && strings.EqualFold(scheme, "Basic") {
				if dec, err := base64.StdEncoding.DecodeString(strings.TrimSpace(rest)); err == nil {
					text = string(dec)
				}
			}
			if kind := s.untracked([]byte(text)); kind != "" {
				if blk := s.flagUntracked(ctx, kind, dst.Host, name+" header"); blk != nil {
					return nil, blk, nil
				}
			}
		}
	}
	if r.Body != nil && r.Body != http.NoBody && len(s.creds) == 0 {
		r.Body = newFakeScanner(s, ctx, dst.Host, r)
	}
	if len(s.creds) == 0 {
		return nil, nil, nil
	}
	urlText := r.URL.RequestURI()
	if q, err := neturl.QueryUnescape(urlText); err == nil {
		urlText += " " + q // a percent-encoded fake counts as the fake
	}
	for _, h := range s.find(urlText) {
		if !inScope(h.cred, dst.Host) {
			return nil, s.compromise(ctx, h.cred, dst.Host, "URL"), nil
		}
		if h.cred.FakeKeyID != "" && h.fake == h.cred.Fake {
			return nil, s.compromise(ctx, h.cred, dst.Host, "URL (an AWS secret key is never sent)"), nil
		}
		if h.fake == h.cred.FakeKeyID {
			// A presigned URL names its key in the query; guard does not
			// re-sign those (the signature covers an expiry the client
			// chose), so they are refused, in scope or not.
			return nil, refuse("a URL presigned with the fake AWS key " + h.fake + " cannot be re-signed; presign it on the host with the real key"), nil
		}
	}
	type swap struct {
		name string
		i    int
		val  string
	}
	var swaps []swap
	used := map[*Credential]string{}
	var awsCred, certCred *Credential
	var basicForms []string // base64 of user:real, user:fake, for the scrubber
	for name, values := range r.Header {
		for i, v := range values {
			text, basic := v, false
			if scheme, rest, ok := strings.Cut(v, " "); ok && strings.EqualFold(scheme, "Basic") {
				if dec, err := base64.StdEncoding.DecodeString(strings.TrimSpace(rest)); err == nil {
					text, basic = string(dec), true
				}
			}
			// The raw value is searched too: a "Basic " prefix must not
			// hide a fake that happens to be valid base64.
			hits := s.find(text)
			if basic {
				for _, h := range s.find(v) {
					if !inScope(h.cred, dst.Host) {
						return nil, s.compromise(ctx, h.cred, dst.Host, name+" header"), nil
					}
				}
			}
			for _, h := range hits {
				if !inScope(h.cred, dst.Host) {
					return nil, s.compromise(ctx, h.cred, dst.Host, name+" header"), nil
				}
				if h.cred.FakeKeyID != "" && h.fake == h.cred.Fake {
					// An AWS fake secret is only ever a signing key: on the
					// wire, even to its own hosts, it is a theft attempt.
					return nil, s.compromise(ctx, h.cred, dst.Host, name+" header (an AWS secret key is never sent)"), nil
				}
				if !dst.TLS || !carries(h.cred, name) {
					continue // never in clear text, only in its headers
				}
				if h.fake == h.cred.FakeKeyID {
					if strings.EqualFold(name, "Authorization") {
						awsCred = h.cred // re-signed below, not swapped
					}
					continue
				}
				if h.cred.ClientCert != nil {
					if strings.EqualFold(name, "Authorization") {
						certCred = h.cred // the fake bearer goes; the certificate speaks
					}
					continue // a certificate is never put in a header
				}
				real, err := h.cred.Real()
				if err == nil && strings.Contains(real, "-----BEGIN") {
					err = errors.New("a PEM secret is never sent in a header")
				}
				if err != nil {
					return nil, &Block{Status: http.StatusForbidden, Header: http.Header{"Content-Type": {"application/json"}},
						Body: []byte(fmt.Sprintf(`{"message":%q}`+"\n", "credential "+h.cred.ID+" is not available ("+err.Error()+"); blocked by guardrails"))}, nil
				}
				used[h.cred] = real
				if basic {
					user, _, _ := strings.Cut(text, ":")
					basicForms = append(basicForms, base64.StdEncoding.EncodeToString([]byte(user+":"+real)),
						base64.StdEncoding.EncodeToString([]byte(user+":"+h.fake)))
				}
				text = strings.ReplaceAll(text, h.fake, real)
			}
			if len(hits) > 0 && text != v {
				if basic {
					scheme, _, _ := strings.Cut(v, " ")
					text = scheme + " " + base64.StdEncoding.EncodeToString([]byte(text))
				}
				swaps = append(swaps, swap{name, i, text})
			}
		}
	}
	for c := range used {
		if c.AskBeforeUse && s.approve != nil {
			if ok, why := s.approve.ApproveUse(ctx, c, r.Method+" "+dst.Host+r.URL.EscapedPath()); !ok {
				return nil, &Block{Status: http.StatusForbidden, Header: http.Header{"Content-Type": {"application/json"}},
					Body: []byte(fmt.Sprintf(`{"message":%q}`+"\n", "use of credential "+c.ID+" was not allowed ("+why+"); blocked by guardrails"))}, nil
			}
		}
	}
	if awsCred != nil {
		if awsCred.AskBeforeUse && s.approve != nil {
			if ok, why := s.approve.ApproveUse(ctx, awsCred, r.Method+" "+dst.Host+r.URL.EscapedPath()); !ok {
				return nil, refuse("use of credential " + awsCred.ID + " was not allowed (" + why + ")"), nil
			}
		}
		if err := resignAWS(ctx, r, awsCred); err != nil {
			return nil, refuse("AWS request with credential " + awsCred.ID + " refused: " + err.Error()), nil
		}
		real, _ := awsCred.Real()
		used[awsCred] = real
	}
	var cert *tls.Certificate
	if certCred != nil {
		if certCred.AskBeforeUse && s.approve != nil {
			if ok, why := s.approve.ApproveUse(ctx, certCred, r.Method+" "+dst.Host+r.URL.EscapedPath()); !ok {
				return nil, refuse("use of credential " + certCred.ID + " was not allowed (" + why + ")"), nil
			}
		}
		var err error
		if cert, err = certCred.ClientCert(); err != nil {
			return nil, refuse("credential " + certCred.ID + " is not available (" + err.Error() + ")"), nil
		}
		r.Header.Del("Authorization")
		if err := s.events.Emit(ctx, audit.Event{Type: audit.TypeCredUse, Host: dst.Host, Scope: certCred.ID, Method: r.Method, Path: audit.Truncate(r.URL.Path, 512)}); err != nil {
			return nil, refuse(errUnrecorded), nil
		}
	}
	for _, sw := range swaps {
		if (awsCred != nil || certCred != nil) && strings.EqualFold(sw.name, "Authorization") {
			continue // re-signed or dropped: nothing of the client's stays
		}
		if vals := r.Header[sw.name]; sw.i < len(vals) {
			vals[sw.i] = sw.val
		}
	}
	for c := range used {
		// A use that cannot be recorded does not happen.
		if err := s.events.Emit(ctx, audit.Event{Type: audit.TypeCredUse, Host: dst.Host, Scope: c.ID, Method: r.Method, Path: audit.Truncate(r.URL.Path, 512)}); err != nil {
			return nil, refuse(errUnrecorded), nil
		}
	}
	if r.Body != nil && r.Body != http.NoBody {
		if dst.TLS {
			blk, err := s.swapBody(ctx, r, dst, used)
			if blk != nil || err != nil {
				return nil, blk, err
			}
		}
		r.Body = newFakeScanner(s, ctx, dst.Host, r)
	}
	if len(used) == 0 && cert == nil {
		return nil, nil, nil
	}
	if len(used) > 0 && awsCred == nil {
		// The response is scrubbed of the real secrets: ask for it
		// uncompressed, so the scrubber sees the bytes as they are. (A
		// signed AWS request keeps its headers; a gzip answer is
		// decompressed for the scrubber instead.)
		r.Header.Del("Accept-Encoding")
	}
	sc := &Injection{ClientCert: cert, pairs: basicForms}
	for c, real := range used {
		sc.pairs = append(sc.pairs, real, c.Fake)
		if c.RealKeyID != nil && c.RealKeyID() != "" {
			sc.pairs = append(sc.pairs, c.RealKeyID(), c.FakeKeyID)
		}
	}
	return sc, nil, nil
}

// errUnrecorded refuses a credential use the event log could not record.
const errUnrecorded = "the event log cannot be written, so the credential was not used"

// refuse is a 403 for a request the credential hook will not send.
func refuse(message string) *Block {
	return &Block{Status: http.StatusForbidden, Header: http.Header{"Content-Type": {"application/json"}},
		Body: []byte(fmt.Sprintf(`{"message":%q}`+"\n", message+"; blocked by guardrails")), Reason: message}
}

// databaseServices carry their password in request bodies (a login call,
// a DSN in a JSON document): only these are swapped in bodies.
var databaseServices = map[string]bool{"postgres": true, "mysql": true, "mongodb": true, "clickhouse": true, "elasticsearch": true}

// maxSwappedBody bounds a body read whole to swap a database password in
// it; a larger one, or one of unknown length, goes as sent.
const maxSwappedBody = 1 << 20

// maxSwapping bounds the bodies held for swapping at once.
const maxSwapping = 32

// passwordField matches where a password goes just before a fake: a JSON
// "password" string, a form's password field, a URL's user:password@.
var (
	jsonPassword = regexp.MustCompile(`(?i)"(password|passwd|pass|pwd)"\s*:\s*"$`)
	formPassword = regexp.MustCompile(`(?i)(^|&)(password|passwd|pass|pwd)=$`)
	dsnPassword  = regexp.MustCompile(`(?i)[a-z][a-z0-9+.-]*://[^\s/:@"]*:$`)
)

// passwordContext says the fake at body[i:i+n] is a password field's whole
// value, the one place a server takes it as a login and not as data that
// could come back (SELECT base64Encode('<fake>') would return the real
// password, encoded past the scrubber).
func passwordContext(body string, i, n int) bool {
	before, after := body[max(0, i-200):i], body[i+n:]
	switch {
	case jsonPassword.MatchString(before):
		return strings.HasPrefix(after, `"`)
	case formPassword.MatchString(before):
		return after == "" || after[0] == '&'
	case dsnPassword.MatchString(before):
		return strings.HasPrefix(after, "@")
	}
	return false
}

// swapBody puts the real password of an in-scope database credential in
// place of its fake in a request body's password field, and fixes
// Content-Length. A fake anywhere else in such a body is refused.
func (s *Swapper) swapBody(ctx context.Context, r *http.Request, dst Destination, used map[*Credential]string) (*Block, error) {
	var creds []*Credential
	for _, c := range s.creds {
		if databaseServices[c.Service] && c.FakeKeyID == "" && inScope(c, dst.Host) {
			creds = append(creds, c)
		}
	}
	if len(creds) == 0 || r.ContentLength < 0 || r.ContentLength > maxSwappedBody {
		return nil, nil // streamed as sent; the scanner still checks it
	}
	select {
	case s.swapping <- struct{}{}:
		defer func() { <-s.swapping }()
	default:
		return nil, nil
	}
	head, err := io.ReadAll(io.LimitReader(r.Body, maxSwappedBody+1))
	if err != nil {
		return nil, err
	}
	r.Body = io.NopCloser(bytes.NewReader(head))
	body := string(head)
	for _, c := range creds {
		n := 0
		for from := 0; ; {
			i := strings.Index(body[from:], c.Fake)
			if i < 0 {
				break
			}
			if !passwordContext(body, from+i, len(c.Fake)) {
				return refuse("the fake of credential " + c.ID + " may only be a password field's value in a request body"), nil
			}
			n++
			from += i + len(c.Fake)
		}
		if n == 0 {
			continue
		}
		real, err := c.Real()
		if err != nil {
			return refuse("credential " + c.ID + " is not available (" + err.Error() + ")"), nil
		}
		if c.AskBeforeUse && s.approve != nil {
			if ok, why := s.approve.ApproveUse(ctx, c, r.Method+" "+dst.Host+r.URL.EscapedPath()); !ok {
				return refuse("use of credential " + c.ID + " was not allowed (" + why + ")"), nil
			}
		}
		body = strings.ReplaceAll(body, c.Fake, real)
		used[c] = real
		if err := s.events.Emit(ctx, audit.Event{Type: audit.TypeCredUse, Host: dst.Host, Scope: c.ID, Method: r.Method, Path: audit.Truncate(r.URL.Path, 512)}); err != nil {
			return refuse(errUnrecorded), nil
		}
	}
	r.Body = io.NopCloser(strings.NewReader(body))
	r.ContentLength = int64(len(body))
	if r.Header.Get("Content-Length") != "" {
		r.Header.Set("Content-Length", strconv.Itoa(len(body)))
	}
	return nil, nil
}

// carries says a header is one the credential goes in.
func carries(c *Credential, header string) bool {
	if strings.EqualFold(header, "Authorization") {
		return true
	}
	for _, h := range c.Headers {
		if strings.EqualFold(h, header) {
			return true
		}
	}
	return false
}

// newFakeScanner wraps a request's body. A compressed body (gzip,
// deflate) is also decompressed, on the side, and the result scanned: a
// fake must not travel out of scope inside a gzip stream.
func newFakeScanner(s *Swapper, ctx context.Context, host string, r *http.Request) *fakeScanner {
	f := &fakeScanner{s: s, ctx: ctx, host: host, r: r.Body, trailer: r.Trailer}
	switch strings.ToLower(strings.TrimSpace(r.Header.Get("Content-Encoding"))) {
	case "gzip", "x-gzip":
		f.side = startSideScan(s, func(rd io.Reader) (io.Reader, error) { return gzip.NewReader(rd) })
	case "deflate":
		f.side = startSideScan(s, func(rd io.Reader) (io.Reader, error) { return flate.NewReader(rd), nil })
	}
	return f
}

// sideScan decompresses a copy of a body as it passes and scans it.
type sideScan struct {
	pw   *io.PipeWriter
	done chan struct{}
	hits []fakeHit
	// kinds of real-looking secrets seen
	untracked string
}

func startSideScan(s *Swapper, open func(io.Reader) (io.Reader, error)) *sideScan {
	pr, pw := io.Pipe()
	sc := &sideScan{pw: pw, done: make(chan struct{})}
	go func() {
		defer close(sc.done)
		defer pr.Close()
		zr, err := open(pr)
		if err != nil {
			io.Copy(io.Discard, pr)
			return
		}
		var window []byte
		buf := make([]byte, 64<<10)
		for {
			n, err := zr.Read(buf)
			window = append(window, buf[:n]...)
			sc.hits = append(sc.hits, s.findBytes(window)...)
			if sc.untracked == "" {
				sc.untracked = s.untracked(window)
			}
			if keep := s.maxLen - 1; len(window) > keep {
				window = append(window[:0], window[len(window)-keep:]...)
			}
			if err != nil {
				io.Copy(io.Discard, pr)
				return
			}
		}
	}()
	return sc
}

// fakeScanner passes a request body through, failing it when a fake
// appears for a host outside that fake's scope. It holds back the last
// bytes of each read until the next, so that a fake split across reads is
// still seen before any of it goes upstream.
type fakeScanner struct {
	s       *Swapper
	ctx     context.Context
	host    string
	r       io.ReadCloser
	buf     []byte
	side    *sideScan   // the decompressed copy's scan, for compressed bodies
	trailer http.Header // the request's trailer, filled in at the body's end
	flagged bool        // an untracked secret was flagged already
	pending []byte      // read, scanned, not yet passed on
	out     []byte      // ready to pass on
	eof     bool
	err     error
}

func (f *fakeScanner) Read(p []byte) (int, error) {
	for len(f.out) == 0 {
		if f.err != nil {
			return 0, f.err
		}
		if f.eof {
			if len(f.pending) == 0 {
				return 0, io.EOF
			}
			f.out, f.pending = f.pending, nil
			break
		}
		if f.buf == nil {
			f.buf = make([]byte, 64<<10)
		}
		n, err := f.r.Read(f.buf)
		f.pending = append(f.pending, f.buf[:n]...)
		if f.side != nil && n > 0 {
			f.side.pw.Write(f.buf[:n])
		}
		if err == io.EOF && f.side != nil {
			// The decompressed copy is scanned to its end before the last
			// bytes pass.
			f.side.pw.Close()
			<-f.side.done
			for _, h := range f.side.hits {
				if !inScope(h.cred, f.host) {
					f.s.compromise(f.ctx, h.cred, f.host, "compressed body")
					f.err, f.pending = errCompromise, nil
					return 0, f.err
				}
			}
			if kind := f.side.untracked; kind != "" && !f.flagged {
				f.flagged = true
				if f.s.flagUntracked(f.ctx, kind, f.host, "compressed body") != nil {
					f.err, f.pending = errCompromise, nil
					return 0, f.err
				}
			}
			f.side = nil
		}
		if err == io.EOF {
			f.eof = true
			for _, values := range f.trailer {
				for _, h := range f.s.find(strings.Join(values, " ")) {
					if !inScope(h.cred, f.host) {
						f.s.compromise(f.ctx, h.cred, f.host, "trailer")
						f.err, f.pending = errCompromise, nil
						return 0, f.err
					}
				}
			}
		} else if err != nil {
			f.err = err
		}
		// The held-back tail was scanned already, but a fake may start in
		// it and end in the new bytes: scan both.
		for _, h := range f.s.findBytes(f.pending) {
			if !inScope(h.cred, f.host) {
				f.s.compromise(f.ctx, h.cred, f.host, "body")
				f.err, f.pending = errCompromise, nil
				return 0, f.err
			}
		}
		if !f.flagged {
			if kind := f.s.untracked(f.pending); kind != "" {
				f.flagged = true
				if f.s.flagUntracked(f.ctx, kind, f.host, "body") != nil {
					f.err, f.pending = errCompromise, nil
					return 0, f.err
				}
			}
		}
		if keep := f.s.maxLen - 1; !f.eof && len(f.pending) > keep {
			f.out = append(f.out[:0], f.pending[:len(f.pending)-keep]...)
			f.pending = append(f.pending[:0], f.pending[len(f.pending)-keep:]...)
		}
	}
	n := copy(p, f.out)
	f.out = f.out[n:]
	return n, nil
}

func (f *fakeScanner) Close() error {
	if f.side != nil {
		f.side.pw.CloseWithError(io.ErrClosedPipe)
	}
	return f.r.Close()
}

// Injection is what a request's credentials need after the hook: the
// client certificate to present upstream, and the real secrets to turn
// back into their fakes if the server reflects them (in the response's
// headers and body) before the VM sees them.
type Injection struct {
	// ClientCert is presented on the upstream TLS connection.
	ClientCert *tls.Certificate

	pairs []string // real, fake, ...
	once  sync.Once
	rep   *strings.Replacer
}

func (sc *Injection) replacer() *strings.Replacer {
	sc.once.Do(func() { sc.rep = strings.NewReplacer(sc.pairs...) })
	return sc.rep
}

// Response scrubs resp in place.
func (sc *Injection) Response(resp *http.Response) {
	if len(sc.pairs) == 0 {
		return
	}
	rep := sc.replacer()
	for name, values := range resp.Header {
		for i, v := range values {
			resp.Header[name][i] = rep.Replace(v)
		}
	}
	// After a 101 the body is the upgraded channel, which must stay
	// writable; only its headers are scrubbed. (What flows through the
	// channel is the protocol's; guard does not see into it.)
	if resp.Body != nil && resp.StatusCode != http.StatusSwitchingProtocols {
		switch enc := strings.ToLower(strings.TrimSpace(resp.Header.Get("Content-Encoding"))); enc {
		case "", "identity":
		case "gzip", "x-gzip":
			if zr, err := gzip.NewReader(resp.Body); err == nil {
				resp.Body = readCloser{zr, resp.Body}
			} else {
				resp.Body = io.NopCloser(strings.NewReader("guard: a compressed response it could not read was withheld\n"))
			}
			resp.Header.Del("Content-Encoding")
		case "deflate":
			resp.Body = readCloser{flate.NewReader(resp.Body), resp.Body}
			resp.Header.Del("Content-Encoding")
		default:
			// A body guard cannot read might carry the real secret back.
			resp.Body.Close()
			resp.Body = io.NopCloser(strings.NewReader("guard: a response in encoding " + enc + " to a request that carried a real secret was withheld\n"))
			resp.Header.Del("Content-Encoding")
		}
		maxReal := 0
		for i := 0; i < len(sc.pairs); i += 2 {
			maxReal = max(maxReal, len(sc.pairs[i]))
		}
		resp.Body = &scrubReader{r: resp.Body, rep: rep, keep: maxReal - 1, reals: sc.pairs, trailer: resp.Trailer}
		// Fakes are as long as or longer than... lengths may differ: the
		// body's length is no longer known.
		resp.ContentLength = -1
		resp.Header.Del("Content-Length")
	}
}

// readCloser reads from one reader and closes another.
type readCloser struct {
	io.Reader
	c io.Closer
}

func (r readCloser) Close() error { return r.c.Close() }

// scrubReader replaces reals in a stream, holding back the tail of each
// chunk (one secret's length less one) so that a secret split across reads
// is replaced whole.
type scrubReader struct {
	r       io.ReadCloser
	rep     *strings.Replacer
	reals   []string
	keep    int
	pending []byte
	out     []byte
	eof     bool
	// trailer is the response's trailer, filled in when the body ends.
	trailer http.Header
}

func (s *scrubReader) Read(p []byte) (int, error) {
	for len(s.out) == 0 {
		if s.eof {
			if len(s.pending) == 0 {
				return 0, io.EOF
			}
			s.out = []byte(s.rep.Replace(string(s.pending)))
			s.pending = nil
			break
		}
		buf := make([]byte, 32<<10)
		n, err := s.r.Read(buf)
		s.pending = append(s.pending, buf[:n]...)
		if err != nil {
			if err != io.EOF {
				return 0, err
			}
			s.eof = true
			for name, values := range s.trailer {
				for i, v := range values {
					s.trailer[name][i] = s.rep.Replace(v)
				}
			}
			continue
		}
		cut := len(s.pending) - s.keep
		if cut <= 0 {
			continue
		}
		// Never cut inside a secret: move the cut back before any secret
		// that straddles it.
		for i := 0; i < len(s.reals); i += 2 {
			real := []byte(s.reals[i])
			from := max(cut-len(real)+1, 0)
			if j := bytes.Index(s.pending[from:], real); j >= 0 && from+j < cut && from+j+len(real) > cut {
				cut = from + j
			}
		}
		s.out = []byte(s.rep.Replace(string(s.pending[:cut])))
		s.pending = append(s.pending[:0], s.pending[cut:]...)
	}
	n := copy(p, s.out)
	s.out = s.out[n:]
	return n, nil
}

func (s *scrubReader) Close() error { return s.r.Close() }
