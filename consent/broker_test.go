package consent

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// fakeClock moves only when the test says so.
type fakeClock struct {
	mu     sync.Mutex
	now    time.Time
	timers []*fakeTimer
}

type fakeTimer struct {
	c       *fakeClock
	at      time.Time
	f       func()
	stopped bool
}

func newFakeClock() *fakeClock {
	return &fakeClock{now: time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)}
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) AfterFunc(d time.Duration, f func()) Timer {
	c.mu.Lock()
	defer c.mu.Unlock()
	t := &fakeTimer{c: c, at: c.now.Add(d), f: f}
	c.timers = append(c.timers, t)
	return t
}

func (t *fakeTimer) Stop() bool {
	t.c.mu.Lock()
	defer t.c.mu.Unlock()
	was := !t.stopped
	t.stopped = true
	return was
}

// Advance moves time on and runs the timers that fell due.
func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	var due []*fakeTimer
	for _, t := range c.timers {
		if !t.stopped && !t.at.After(c.now) {
			t.stopped = true
			due = append(due, t)
		}
	}
	c.mu.Unlock()
	for _, t := range due {
		t.f()
	}
}

// records collects what the broker records.
type records struct {
	mu   sync.Mutex
	all  []Record
	fail error
}

func (r *records) RecordConsent(_ context.Context, rec Record) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.fail != nil {
		return r.fail
	}
	r.all = append(r.all, rec)
	return nil
}

func (r *records) list() []Record {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Record(nil), r.all...)
}

type rig struct {
	t     *testing.T
	clock *fakeClock
	rec   *records
	b     *Broker
	p     *Prompter
}

func newRig(t *testing.T) *rig {
	r := &rig{t: t, clock: newFakeClock(), rec: &records{}}
	r.b = NewBroker(Config{Clock: r.clock, Record: r.rec})
	r.p = r.b.Attach()
	return r
}

func write(scope, op string) Question {
	return Question{Kind: KindWrite, Workspace: "ws", Scope: scope, Operation: op}
}

func use(cred, op string) Question {
	return Question{Kind: KindUse, Workspace: "ws", Scope: cred, Subject: "GitHub token", Operation: op}
}

// ask starts an Ask and returns where its decision will arrive.
func (r *rig) ask(ctx context.Context, q Question) <-chan Decision {
	out := make(chan Decision, 1)
	go func() { out <- r.b.Ask(ctx, q) }()
	return out
}

// next returns the prompter's next update.
func (r *rig) next() Update {
	r.t.Helper()
	select {
	case u, ok := <-r.p.Updates():
		if !ok {
			r.t.Fatal("the prompter's stream closed")
		}
		return u
	case <-time.After(5 * time.Second):
		r.t.Fatal("no update for the prompter")
	}
	return Update{}
}

// question waits for the next question on the prompter's screen.
func (r *rig) question() Pending {
	r.t.Helper()
	u := r.next()
	if u.Type != UpdateQuestion {
		r.t.Fatalf("want a question, got %+v", u)
	}
	return *u.Question
}

func (r *rig) answer(id, choice string) {
	r.t.Helper()
	if _, err := r.b.Answer(context.Background(), id, choice); err != nil {
		r.t.Fatal(err)
	}
}

func decided(t *testing.T, ch <-chan Decision) Decision {
	t.Helper()
	select {
	case d := <-ch:
		return d
	case <-time.After(5 * time.Second):
		t.Fatal("the ask was not decided")
	}
	return Decision{}
}

// askedAgain says whether a new ask of q goes to the prompter (true) or is
// settled at once (false, with its decision).
func (r *rig) askedAgain(q Question) (bool, Decision) {
	r.t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	ch := r.ask(ctx, q)
	select {
	case d := <-ch:
		cancel()
		return false, d
	case u := <-r.p.Updates():
		if u.Type != UpdateQuestion {
			r.t.Fatalf("unexpected update %+v", u)
		}
		cancel()
		decided(r.t, ch)
		if w := r.next(); w.Type != UpdateWithdrawn || w.ID != u.Question.ID {
			r.t.Fatalf("a canceled ask was not withdrawn: %+v", w)
		}
		return true, Decision{}
	case <-time.After(5 * time.Second):
		r.t.Fatal("neither asked nor decided")
	}
	return false, Decision{}
}

func TestChoicesHaveOneDefault(t *testing.T) {
	for _, k := range []Kind{KindWrite, KindUse} {
		n := 0
		for _, c := range Choices(k) {
			if c.Default {
				n++
				if !c.Allow {
					t.Errorf("%s: the default denies", k)
				}
			}
		}
		if n != 1 || len(Choices(k)) != 4 {
			t.Errorf("%s: %d defaults among %d choices", k, n, len(Choices(k)))
		}
	}
	if got := write("github", "DELETE /repos/o/r").Title(); got != `Allow write on "github" from workspace "ws"?` {
		t.Errorf("write title %q", got)
	}
	if got := use("gh", "GET /user").Title(); got != `Allow "ws" to use credential "GitHub token"?` {
		t.Errorf("use title %q", got)
	}
}

// TestEveryChoice answers each choice and checks what the next asks of the
// same scope get, before and after the choice's time runs out.
func TestEveryChoice(t *testing.T) {
	for _, tc := range []struct {
		q        Question
		choice   string
		allow    bool
		lasts    time.Duration // how long the answer is remembered; 0: not at all
		session  bool
		nextKind string
	}{
		{write("github", "POST /repos/o/r/issues"), "15m", true, 15 * time.Minute, false, ""},
		{write("github", "POST /repos/o/r/issues"), ChoiceOnce, true, 0, false, ""},
		{write("github", "POST /repos/o/r/issues"), ChoiceSession, true, 0, true, ""},
		{write("github", "POST /repos/o/r/issues"), ChoiceDeny, false, 60 * time.Second, false, ""},
		{use("gh", "GET /user"), "5m", true, 5 * time.Minute, false, ""},
		{use("gh", "GET /user"), "1h", true, time.Hour, false, ""},
		{use("gh", "GET /user"), ChoiceSession, true, 0, true, ""},
		{use("gh", "GET /user"), ChoiceDeny, false, 5 * time.Minute, false, ""},
	} {
		t.Run(string(tc.q.Kind)+"/"+tc.choice, func(t *testing.T) {
			r := newRig(t)
			ch := r.ask(context.Background(), tc.q)
			q := r.question()
			if q.Title != tc.q.Title() || q.Operation != tc.q.Operation {
				t.Fatalf("prompt shows %+v", q)
			}
			r.answer(q.ID, tc.choice)
			d := decided(t, ch)
			if d.Allow != tc.allow || d.Choice != tc.choice {
				t.Fatalf("decision %+v", d)
			}
			if w := r.next(); w.Type != UpdateWithdrawn || w.ID != q.ID {
				t.Fatalf("answered question not withdrawn: %+v", w)
			}
			// Another operation in the same scope, just after.
			other := tc.q
			other.Operation = "PATCH /something/else"
			remembered := tc.lasts > 0 || tc.session
			if asked, d := r.askedAgain(other); asked == remembered || (!asked && d.Allow != tc.allow) {
				t.Fatalf("right after: asked=%v decision=%+v", asked, d)
			}
			if tc.session {
				r.clock.Advance(1000 * time.Hour)
				if asked, d := r.askedAgain(other); asked || !d.Allow {
					t.Fatalf("session grant ended: asked=%v %+v", asked, d)
				}
				return
			}
			if tc.lasts > 0 {
				r.clock.Advance(tc.lasts - time.Second)
				if asked, _ := r.askedAgain(other); asked {
					t.Fatal("asked again before the answer ran out")
				}
				r.clock.Advance(time.Second)
				if asked, _ := r.askedAgain(other); !asked {
					t.Fatal("not asked again once the answer ran out")
				}
			}
			recs := r.rec.list()
			if len(recs) == 0 || recs[0].Choice != tc.choice || recs[0].Allow != tc.allow {
				t.Fatalf("records %+v", recs)
			}
		})
	}
}

// TestDenialWinsOverOlderAllow: the newest answer for a scope replaces the
// one before, so a denial given after an allow holds.
func TestDenialWinsOverOlderAllow(t *testing.T) {
	r := newRig(t)
	ch := r.ask(context.Background(), use("gh", "GET /user"))
	r.answer(r.question().ID, "1h")
	decided(t, ch)
	r.next()
	// The grant is revoked and the person, asked again, says no.
	for _, g := range r.b.Approvals() {
		r.b.Revoke(g.ID)
	}
	ch = r.ask(context.Background(), use("gh", "GET /user"))
	r.answer(r.question().ID, ChoiceDeny)
	if d := decided(t, ch); d.Allow {
		t.Fatal("denial answered as allow")
	}
	r.next()
	if asked, d := r.askedAgain(use("gh", "GET /repos")); asked || d.Allow {
		t.Fatalf("after the denial: asked=%v %+v", asked, d)
	}
	if a := r.b.Approvals(); len(a) != 1 || a[0].Allow {
		t.Fatalf("approvals %+v", a)
	}
}

// TestIdenticalAsksShareOnePrompt: 1,000 concurrent identical asks show
// one question, and the one answer releases them all.
func TestIdenticalAsksShareOnePrompt(t *testing.T) {
	r := newRig(t)
	const n = 1000
	var wg sync.WaitGroup
	var allowed atomic.Int32
	var queued sync.WaitGroup
	queued.Add(n)
	for range n {
		wg.Go(func() {
			queued.Done()
			if r.b.Ask(context.Background(), write("github", "DELETE /repos/o/r")).Allow {
				allowed.Add(1)
			}
		})
	}
	q := r.question()
	queued.Wait()
	// Every asker is either waiting on q or about to join it.
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(time.Millisecond) {
		r.b.mu.Lock()
		waiters := r.b.byID[q.ID].waiters
		r.b.mu.Unlock()
		if waiters == n {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d asks joined the question", waiters, n)
		}
	}
	r.answer(q.ID, ChoiceOnce)
	wg.Wait()
	if allowed.Load() != n {
		t.Fatalf("%d of %d released as allowed", allowed.Load(), n)
	}
	if w := r.next(); w.Type != UpdateWithdrawn {
		t.Fatalf("update %+v", w)
	}
	select {
	case u := <-r.p.Updates():
		t.Fatalf("a second prompt: %+v", u)
	default:
	}
	if recs := r.rec.list(); len(recs) != 1 || recs[0].Waiting != n {
		t.Fatalf("records %+v", recs)
	}
}

// TestDifferentAsksQueue: different operations are shown one after
// another in order; a grant from one answer settles the others of its
// scope, and leaves other scopes waiting.
func TestDifferentAsksQueue(t *testing.T) {
	r := newRig(t)
	a := r.ask(context.Background(), write("github", "POST /a"))
	q1 := r.question()
	b := r.ask(context.Background(), write("github", "POST /b"))
	q2 := r.question()
	c := r.ask(context.Background(), write("aws", "ec2:RunInstances"))
	q3 := r.question()
	if got := r.b.Pending(); len(got) != 3 || got[0].ID != q1.ID || got[1].ID != q2.ID || got[2].ID != q3.ID {
		t.Fatalf("queue %+v", got)
	}
	r.answer(q1.ID, "15m")
	if !decided(t, a).Allow || !decided(t, b).Allow {
		t.Fatal("the grant did not settle its scope")
	}
	if w1, w2 := r.next(), r.next(); w1.ID != q1.ID || w2.ID != q2.ID {
		t.Fatalf("withdrawals %+v %+v", w1, w2)
	}
	select {
	case d := <-c:
		t.Fatalf("another scope was settled: %+v", d)
	default:
	}
	if got := r.b.Pending(); len(got) != 1 || got[0].ID != q3.ID {
		t.Fatalf("still waiting %+v", got)
	}
	r.answer(q3.ID, ChoiceDeny)
	if decided(t, c).Allow {
		t.Fatal("deny allowed")
	}
	r.next() // q3's withdrawal
	// A denial settles waiting questions of its scope too.
	d1 := r.ask(context.Background(), write("gitlab", "POST /x"))
	g1 := r.question()
	d2 := r.ask(context.Background(), write("gitlab", "POST /y"))
	r.question()
	r.answer(g1.ID, ChoiceDeny)
	if decided(t, d1).Allow || decided(t, d2).Allow {
		t.Fatal("a denial left its scope allowed")
	}
}

// TestFailsClosed: every way of not getting an answer denies.
func TestFailsClosed(t *testing.T) {
	t.Run("no prompter", func(t *testing.T) {
		rec := &records{}
		b := NewBroker(Config{Clock: newFakeClock(), Record: rec})
		d := b.Ask(context.Background(), write("github", "POST /a"))
		if d.Allow || d.Reason == "" || len(rec.list()) != 1 {
			t.Fatalf("%+v %+v", d, rec.list())
		}
	})
	t.Run("timeout", func(t *testing.T) {
		r := newRig(t)
		ch := r.ask(context.Background(), write("github", "POST /a"))
		q := r.question()
		r.clock.Advance(DefaultTimeout - time.Millisecond)
		select {
		case <-ch:
			t.Fatal("decided before the timeout")
		default:
		}
		r.clock.Advance(time.Millisecond)
		if d := decided(t, ch); d.Allow {
			t.Fatal("timeout allowed")
		}
		if w := r.next(); w.ID != q.ID || w.Type != UpdateWithdrawn {
			t.Fatalf("%+v", w)
		}
		if _, err := r.b.Answer(context.Background(), q.ID, "15m"); !errors.Is(err, ErrNotPending) {
			t.Fatalf("a late answer: %v", err)
		}
	})
	t.Run("prompter leaves", func(t *testing.T) {
		r := newRig(t)
		ch := r.ask(context.Background(), write("github", "POST /a"))
		r.question()
		r.p.Detach()
		if d := decided(t, ch); d.Allow {
			t.Fatal("allowed with nobody left to answer")
		}
	})
	t.Run("one of two prompters leaves", func(t *testing.T) {
		r := newRig(t)
		second := r.b.Attach()
		ch := r.ask(context.Background(), write("github", "POST /a"))
		q := r.question()
		r.p.Detach()
		select {
		case d := <-ch:
			t.Fatalf("decided while a prompter remains: %+v", d)
		case <-time.After(50 * time.Millisecond):
		}
		if u := <-second.Updates(); u.Question == nil || u.Question.ID != q.ID {
			t.Fatalf("second prompter saw %+v", u)
		}
		r.b.Answer(context.Background(), q.ID, ChoiceOnce)
		if !decided(t, ch).Allow {
			t.Fatal("the remaining prompter's answer did not count")
		}
	})
	t.Run("request ends", func(t *testing.T) {
		r := newRig(t)
		ctx1, cancel1 := context.WithCancel(context.Background())
		ctx2, cancel2 := context.WithCancel(context.Background())
		ch1 := r.ask(ctx1, write("github", "POST /a"))
		q := r.question()
		ch2 := r.ask(ctx2, write("github", "POST /a"))
		for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(time.Millisecond) {
			r.b.mu.Lock()
			w := r.b.byID[q.ID].waiters
			r.b.mu.Unlock()
			if w == 2 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatal("second ask did not join")
			}
		}
		cancel1()
		if decided(t, ch1).Allow {
			t.Fatal("canceled ask allowed")
		}
		if got := r.b.Pending(); len(got) != 1 {
			t.Fatal("withdrawn while another request still waits")
		}
		cancel2()
		decided(t, ch2)
		if w := r.next(); w.Type != UpdateWithdrawn || w.ID != q.ID {
			t.Fatalf("not withdrawn from the screen: %+v", w)
		}
	})
	t.Run("answer cannot be recorded", func(t *testing.T) {
		r := newRig(t)
		ch := r.ask(context.Background(), write("github", "POST /a"))
		q := r.question()
		r.rec.mu.Lock()
		r.rec.fail = errors.New("disk full")
		r.rec.mu.Unlock()
		r.answer(q.ID, ChoiceSession)
		if decided(t, ch).Allow {
			t.Fatal("an unrecorded answer allowed")
		}
		if len(r.b.Approvals()) != 0 {
			t.Fatal("an unrecorded answer left a grant")
		}
	})
	t.Run("bad choice", func(t *testing.T) {
		r := newRig(t)
		r.ask(context.Background(), write("github", "POST /a"))
		q := r.question()
		if _, err := r.b.Answer(context.Background(), q.ID, "5m"); err == nil {
			t.Fatal("a use choice answered a write question")
		}
	})
}

func TestRevoke(t *testing.T) {
	r := newRig(t)
	for _, scope := range []string{"github", "aws"} {
		ch := r.ask(context.Background(), write(scope, "POST /a"))
		r.answer(r.question().ID, ChoiceSession)
		decided(t, ch)
		r.next()
	}
	list := r.b.Approvals()
	if len(list) != 2 || list[0].Scope != "github" || !list[0].Until.IsZero() {
		t.Fatalf("approvals %+v", list)
	}
	if err := r.b.Revoke(list[0].ID); err != nil {
		t.Fatal(err)
	}
	if asked, _ := r.askedAgain(write("github", "POST /b")); !asked {
		t.Fatal("revoked grant still settles")
	}
	if asked, _ := r.askedAgain(write("aws", "POST /b")); asked {
		t.Fatal("the other grant went too")
	}
	if err := r.b.Revoke("g999"); err == nil {
		t.Fatal("revoking nothing succeeded")
	}
	if n := r.b.RevokeAll(); n != 1 {
		t.Fatalf("revoke-all ended %d", n)
	}
	if asked, _ := r.askedAgain(write("aws", "POST /c")); !asked {
		t.Fatal("revoke-all left a grant")
	}
}

// TestManyAsksAndAnswersAtOnce runs askers, a prompter that answers at
// random, revokes and cancellations together (for -race): every ask ends.
func TestManyAsksAndAnswersAtOnce(t *testing.T) {
	b := NewBroker(Config{Timeout: time.Second})
	p := b.Attach()
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	choices := []string{"15m", ChoiceOnce, ChoiceSession, ChoiceDeny}
	go func() {
		rnd := rand.New(rand.NewPCG(1, 2))
		for u := range p.Updates() {
			if u.Type == UpdateQuestion {
				go b.Answer(context.Background(), u.Question.ID, choices[rnd.IntN(len(choices))])
			}
		}
	}()
	go func() {
		for ctx.Err() == nil {
			b.RevokeAll()
			b.Approvals()
			b.Pending()
			time.Sleep(time.Millisecond)
		}
	}()
	var wg sync.WaitGroup
	for i := range 400 {
		wg.Go(func() {
			actx, cancel := context.WithTimeout(context.Background(), time.Duration(i%7)*time.Millisecond+time.Millisecond)
			defer cancel()
			if i%3 == 0 {
				actx = context.Background()
			}
			b.Ask(actx, write(fmt.Sprintf("scope%d", i%5), fmt.Sprintf("POST /%d", i%11)))
		})
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("asks did not all end")
	}
	p.Detach()
	if n := len(b.Pending()); n != 0 {
		t.Fatalf("%d questions left waiting", n)
	}
}
