package control

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"path/filepath"
	"testing"
	"time"

	"guard/consent"
)

// consentOnly is a backend with a real broker behind it.
type consentOnly struct {
	Backend
	b *consent.Broker
}

func (c consentOnly) Consent() *consent.Broker { return c.b }

// TestConsentOverTheSocket: a prompter attached through the stream sees a
// waiting question, answers it through the API, and the asker gets the
// answer; the approval it left can be listed and revoked; a stale answer
// is a conflict; closing the stream detaches (and so denies).
func TestConsentOverTheSocket(t *testing.T) {
	b := consent.NewBroker(consent.Config{})
	path := filepath.Join(shortTempDir(t), "control.sock")
	ln, err := Listen(path)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go NewServer(consentOnly{b: b}, slog.New(slog.NewTextHandler(io.Discard, nil))).Serve(ctx, ln)
	cl := NewClient(path)

	updates := make(chan consent.Update, 16)
	streamCtx, closeStream := context.WithCancel(ctx)
	go cl.ConsentStream(streamCtx, func(u consent.Update) error { updates <- u; return nil })
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		probe, stop := context.WithTimeout(ctx, 50*time.Millisecond)
		d := b.Ask(probe, consent.Question{Kind: consent.KindWrite, Workspace: "w", Scope: "probe", Operation: "x"})
		stop()
		if d.Reason != "no prompter is attached (run guardctl prompt)" {
			break // attached: the probe waited, and was withdrawn when it gave up
		}
		if time.Now().After(deadline) {
			t.Fatal("the stream never attached")
		}
	}
	decided := make(chan consent.Decision, 1)
	go func() {
		decided <- b.Ask(ctx, consent.Question{Kind: consent.KindWrite, Workspace: "w", Scope: "github", Operation: "DELETE /repos/o/r"})
	}()
	var q *consent.Pending
	for q == nil {
		select {
		case u := <-updates:
			if u.Type == consent.UpdateQuestion && u.Question.Scope == "github" {
				q = u.Question
			}
		case <-time.After(5 * time.Second):
			t.Fatal("no question on the stream")
		}
	}
	if _, err := cl.Answer(ctx, q.ID, "nonsense"); err == nil {
		t.Fatal("a bad choice was taken")
	}
	res, err := cl.Answer(ctx, q.ID, consent.ChoiceSession)
	if err != nil || !res.Allow {
		t.Fatalf("answer: %+v %v", res, err)
	}
	if d := <-decided; !d.Allow {
		t.Fatalf("the asker got %+v", d)
	}
	var rej *RejectedError
	if _, err := cl.Answer(ctx, q.ID, consent.ChoiceDeny); !errors.As(err, &rej) || rej.Status != 409 {
		t.Fatalf("a second answer: %v", err)
	}
	list, err := cl.Approvals(ctx)
	if err != nil || len(list) != 1 || list[0].Scope != "github" {
		t.Fatalf("approvals %+v %v", list, err)
	}
	if _, err := cl.Revoke(ctx, "nope", false); err == nil {
		t.Fatal("revoking an unknown id succeeded")
	}
	if r, err := cl.Revoke(ctx, list[0].ID, false); err != nil || r.Revoked != 1 {
		t.Fatalf("revoke: %+v %v", r, err)
	}
	if _, err := cl.Revoke(ctx, "", false); err == nil {
		t.Fatal("a revoke of nothing was taken")
	}
	// Closing the stream detaches the prompter and denies what waits.
	go func() {
		decided <- b.Ask(ctx, consent.Question{Kind: consent.KindWrite, Workspace: "w", Scope: "gitlab", Operation: "POST /x"})
	}()
	for deadline := time.Now().Add(5 * time.Second); len(b.Pending()) == 0; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the last question never waited")
		}
	}
	closeStream()
	select {
	case d := <-decided:
		if d.Allow || d.Reason != "the prompter went away before answering" {
			t.Fatalf("after the stream closed: %+v", d)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("closing the stream did not deny the waiting question")
	}
}
