package daemon

import (
	"bytes"
	"compress/flate"
	"compress/gzip"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"

	"guard/audit"
	"guard/classify"
	"guard/consent"
	"guard/proxy"
)

// guardrails is the proxy's guardrails hook: it classifies a request to a
// known service (classify), applies that service's write policy
// (consent.Decide), asks a person through the broker when the policy says
// to, and refuses in the service's own protocol. Requests to hosts no
// classifier knows pass untouched; the firewall rules still apply to them.
type guardrails struct {
	d *Daemon
}

// maxRefusedPushDrain bounds how much of a refused push is read and
// dropped, so that git sees the refusal instead of a broken pipe.
const (
	maxRefusedPushDrain = 1 << 30
	refusedPushDrain    = 60 * time.Second
)

func (g guardrails) Check(ctx context.Context, r *http.Request) (*proxy.Block, error) {
	prof, services := g.d.currentProfile()
	host, port := requestHostPort(r)
	rt, ok := services.Route(host, port)
	if !ok {
		return nil, nil
	}
	req := classify.NewRequest(r.Method, host, r.URL.Path, r.URL.RawQuery, r.Header)
	var op classify.Operation
	var push *classify.Push
	switch {
	case classify.IsReceivePack(rt, req) && r.Body != nil:
		// Only the head of a push is read: its commands and commits. The
		// rest streams upstream after it.
		tee := &classify.Tee{R: r.Body, Limit: classify.MaxPushPrefix}
		var p classify.Push
		switch enc := strings.ToLower(strings.TrimSpace(r.Header.Get("Content-Encoding"))); enc {
		case "", "identity":
			p = classify.ReceivePack(tee)
		case "gzip", "x-gzip":
			if zr, err := gzip.NewReader(tee); err == nil {
				p = classify.ReceivePack(zr)
			} else {
				p = classify.Push{Class: classify.Destructive, Reason: "a gzip push that does not decompress"}
			}
		default:
			p = classify.Push{Class: classify.Destructive, Reason: "a push in encoding " + enc + ", which guard cannot read"}
		}
		push = &p
		r.Body = replay(tee.Buf.Bytes(), r.Body)
		op = classify.Operation{Service: rt.Service, Scope: rt.Scope, Class: p.Class, Reason: p.Reason, Detail: p.Detail(r.URL.Path)}
	case classify.NeedsBody(rt, req) && r.Body != nil:
		body, err := io.ReadAll(io.LimitReader(r.Body, classify.MaxBody+1))
		r.Body = replay(body, r.Body)
		req.Body, req.Truncated = decodedBody(r.Header.Get("Content-Encoding"), body)
		op = g.d.classifier.Classify(rt, req)
		if err != nil {
			// A body that cannot be read cannot be vouched for.
			op.Class, op.Reason = classify.Unknown, "the request body could not be read: "+err.Error()
		}
	default:
		op = g.d.classifier.Classify(rt, req)
	}
	if esc := r.URL.EscapedPath(); esc != r.URL.Path && strings.ContainsFunc(r.URL.Path, func(c rune) bool { return c < 0x20 || c == 0x7f }) {
		// A person reads this: a %0A in the path must not draw a new line.
		op.Detail = strings.ReplaceAll(op.Detail, r.URL.Path, esc)
	}
	mode := consent.Mode(prof.Mode(op.Service))
	var message string
	switch consent.Decide(mode, op.Class) {
	case consent.Allow:
		return nil, nil
	case consent.Ask:
		d := g.d.broker.Ask(ctx, consent.Question{Kind: consent.KindWrite, Workspace: prof.Name, Scope: op.Scope, Operation: op.Detail})
		if d.Allow {
			return nil, nil
		}
		message = fmt.Sprintf("%s on %q was not allowed (%s); blocked by guardrails", op.Detail, op.Scope, d.Reason)
	default:
		message = fmt.Sprintf("%s (%s: %s) is not allowed while %q is %s; blocked by guardrails", op.Detail, op.Class, op.Reason, op.Scope, mode)
	}
	g.d.events.Emit(ctx, audit.Event{Type: audit.TypeBlock, Service: op.Service, Scope: op.Scope, Class: string(op.Class),
		Mode: string(mode), Method: audit.Truncate(r.Method, 64), Path: audit.Truncate(r.URL.Path, 512),
		Operation: audit.Truncate(op.Detail, 4096), Reason: message})
	if push != nil {
		// git reads the answer only after sending the whole pack.
		drainCtx, cancel := context.WithTimeout(ctx, refusedPushDrain)
		stop := context.AfterFunc(drainCtx, func() { r.Body.Close() })
		io.Copy(io.Discard, io.LimitReader(r.Body, maxRefusedPushDrain))
		stop()
		cancel()
		return &proxy.Block{Status: http.StatusOK, Reason: message,
			Header: http.Header{"Content-Type": {"application/x-git-receive-pack-result"}, "Cache-Control": {"no-cache"}},
			Body:   classify.ReceivePackRefusal(*push, message)}, nil
	}
	status, header, body := classify.Refusal(rt, req, message)
	return &proxy.Block{Status: status, Header: header, Body: body, Reason: message}, nil
}

// decodedBody is what the classifier reads of a body: decompressed when the
// client compressed it (gzip, deflate), so that a compressed document is
// classified like a plain one; a body in an encoding guard cannot read, or
// larger than classify.MaxBody, is marked truncated (unknown to the
// classifiers that need all of it). The bytes sent upstream are the
// client's own, untouched.
func decodedBody(encoding string, raw []byte) ([]byte, bool) {
	var r io.Reader
	switch strings.ToLower(strings.TrimSpace(encoding)) {
	case "", "identity":
		if len(raw) > classify.MaxBody {
			return raw[:classify.MaxBody], true
		}
		return raw, false
	case "gzip", "x-gzip":
		zr, err := gzip.NewReader(bytes.NewReader(raw))
		if err != nil {
			return nil, true
		}
		r = zr
	case "deflate":
		r = flate.NewReader(bytes.NewReader(raw))
	default:
		return nil, true
	}
	out, err := io.ReadAll(io.LimitReader(r, classify.MaxBody+1))
	if err != nil || len(out) > classify.MaxBody || len(raw) > classify.MaxBody {
		return out[:min(len(out), classify.MaxBody)], true
	}
	return out, false
}

// replay puts what was read back in front of the rest of a body.
func replay(head []byte, rest io.ReadCloser) io.ReadCloser {
	return struct {
		io.Reader
		io.Closer
	}{io.MultiReader(bytes.NewReader(head), rest), rest}
}

// requestHostPort is the request's host, lower-case without a trailing
// dot, and its port (from Host, else the scheme's).
func requestHostPort(r *http.Request) (string, int) {
	host, portText, err := net.SplitHostPort(r.Host)
	if err != nil {
		host, portText = r.Host, ""
	}
	port, err := strconv.Atoi(portText)
	if err != nil {
		port = 80
		if r.TLS != nil || r.URL.Scheme == "https" {
			port = 443
		}
	}
	return strings.ToLower(strings.TrimSuffix(strings.Trim(host, "[]"), ".")), port
}

// consentRecorder puts the broker's answers on the timeline.
type consentRecorder struct {
	events *audit.Log
}

func (c consentRecorder) RecordConsent(ctx context.Context, r consent.Record) error {
	action := "deny"
	if r.Allow {
		action = "allow"
	}
	return c.events.Emit(ctx, audit.Event{Type: audit.TypeConsent, Action: action, Kind: string(r.Question.Kind),
		Scope: r.Question.Scope, Question: r.Question.Title(), Operation: audit.Truncate(r.Question.Operation, 4096),
		Choice: r.Choice, Waiting: r.Waiting, Reason: r.Reason})
}
