package consent

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Recorder puts answers on the timeline (guardrails.consent events). An
// error means the answer could not be recorded, and it becomes a deny.
type Recorder interface {
	RecordConsent(ctx context.Context, r Record) error
}

// Record is one decided question: answered by a person, or denied because
// nobody could answer.
type Record struct {
	Question Question
	Allow    bool
	Choice   string // empty when no person answered
	Reason   string
	// Waiting is how many requests the answer released.
	Waiting int
}

// Config assembles a Broker.
type Config struct {
	// Timeout is how long a question waits for an answer (default 60 s:
	// shorter than git's, curl's and the SDKs' own timeouts, so the agent
	// sees a clean refusal rather than a dropped connection).
	Timeout time.Duration
	Clock   Clock
	Record  Recorder
}

// DefaultTimeout is the prompt timeout when none is configured.
const DefaultTimeout = 60 * time.Second

// maxPending bounds the distinct questions waiting at once; past it a new
// question is denied. Identical questions merge and do not count.
const maxPending = 1000

// ErrNotPending is returned for an answer to a question that is no longer
// waiting: it was answered, timed out, or withdrawn.
var ErrNotPending = errors.New("the question is no longer waiting (answered, timed out or withdrawn)")

type grantKey struct {
	workspace string
	kind      Kind
	scope     string
}

type askKey struct {
	grantKey
	operation string
}

// Grant is a remembered answer for a workspace, kind and scope: an allow
// for a while or for the session, or a denial for a while. The newest
// answer for a scope replaces the one before it.
type Grant struct {
	ID        string    `json:"id"`
	Kind      Kind      `json:"kind"`
	Workspace string    `json:"workspace"`
	Scope     string    `json:"scope"`
	Allow     bool      `json:"allow"`
	Choice    string    `json:"choice"`
	Since     time.Time `json:"since"`
	// Until is when it ends; zero for the rest of the session.
	Until time.Time `json:"until,omitzero"`

	seq    uint64 // orders grants given at the same instant
	reason string // what an ask it settles is told
}

func (g *Grant) live(now time.Time) bool { return g.Until.IsZero() || now.Before(g.Until) }

// Pending is a question waiting for an answer, as prompters see it.
type Pending struct {
	ID        string    `json:"id"`
	Kind      Kind      `json:"kind"`
	Workspace string    `json:"workspace"`
	Scope     string    `json:"scope"`
	Subject   string    `json:"subject,omitempty"`
	Title     string    `json:"title"`
	Operation string    `json:"operation"`
	Choices   []Choice  `json:"choices"`
	Asked     time.Time `json:"asked"`
	Deadline  time.Time `json:"deadline"`
}

type pending struct {
	view     Pending
	key      askKey
	q        Question
	waiters  int
	done     chan struct{}
	decision Decision
	timer    Timer
}

// Broker decides questions by grant, by remembered denial, or by asking.
// Its zero value is not usable; create it with NewBroker.
type Broker struct {
	cfg Config

	mu        sync.Mutex
	seq       uint64
	grants    map[grantKey]*Grant
	pending   map[askKey]*pending
	byID      map[string]*pending
	queue     []*pending // oldest first: the order prompters show them in
	prompters map[*Prompter]struct{}
}

// NewBroker returns a broker with no prompter attached.
func NewBroker(cfg Config) *Broker {
	if cfg.Timeout <= 0 {
		cfg.Timeout = DefaultTimeout
	}
	if cfg.Clock == nil {
		cfg.Clock = realClock{}
	}
	return &Broker{
		cfg:       cfg,
		grants:    map[grantKey]*Grant{},
		pending:   map[askKey]*pending{},
		byID:      map[string]*pending{},
		prompters: map[*Prompter]struct{}{},
	}
}

// Ask decides q, asking the attached prompters when no grant or remembered
// denial covers it, and waits for the answer, the timeout, or ctx.
func (b *Broker) Ask(ctx context.Context, q Question) Decision {
	gk := grantKey{workspace: q.Workspace, kind: q.Kind, scope: q.Scope}
	b.mu.Lock()
	if g := b.liveGrant(gk); g != nil {
		b.mu.Unlock()
		return Decision{Allow: g.Allow, Reason: g.reason}
	}
	var early *Decision
	switch {
	case ctx.Err() != nil:
		b.mu.Unlock()
		return Decision{Reason: "the request ended before anyone answered"}
	case len(b.prompters) == 0:
		early = &Decision{Reason: "no prompter is attached (run guardctl prompt)"}
	case len(b.pending) >= maxPending && b.pending[askKey{gk, q.Operation}] == nil:
		early = &Decision{Reason: fmt.Sprintf("%d questions are already waiting", maxPending)}
	}
	if early != nil {
		b.recordLocked(ctx, q, *early, 1)
		b.mu.Unlock()
		return *early
	}
	ak := askKey{gk, q.Operation}
	p := b.pending[ak]
	if p == nil {
		p = b.enqueueLocked(ak, q)
	}
	p.waiters++
	b.mu.Unlock()

	select {
	case <-p.done:
		return p.decision
	case <-ctx.Done():
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	select {
	case <-p.done:
		return p.decision
	default:
	}
	gone := Decision{Reason: "the request ended before anyone answered"}
	if p.waiters--; p.waiters == 0 {
		// Nobody waits for the answer any more: take it off the screen.
		b.settleLocked(p, gone, "the request ended")
	}
	return gone
}

func until(g *Grant) string {
	if g.Until.IsZero() {
		return "the end of the session"
	}
	return g.Until.Format(time.RFC3339)
}

// liveGrant returns the remembered answer for k, dropping it if expired.
func (b *Broker) liveGrant(k grantKey) *Grant {
	g := b.grants[k]
	if g == nil {
		return nil
	}
	if !g.live(b.cfg.Clock.Now()) {
		delete(b.grants, k)
		return nil
	}
	return g
}

func (b *Broker) nextID(prefix string) string {
	b.seq++
	return prefix + strconv.FormatUint(b.seq, 10)
}

func (b *Broker) enqueueLocked(k askKey, q Question) *pending {
	now := b.cfg.Clock.Now()
	p := &pending{key: k, q: q, done: make(chan struct{})}
	p.view = Pending{
		ID: b.nextID("q"), Kind: q.Kind, Workspace: q.Workspace, Scope: q.Scope, Subject: q.Subject,
		Title: q.Title(), Operation: q.Operation, Choices: Choices(q.Kind),
		Asked: now, Deadline: now.Add(b.cfg.Timeout),
	}
	b.pending[k] = p
	b.byID[p.view.ID] = p
	b.queue = append(b.queue, p)
	p.timer = b.cfg.Clock.AfterFunc(b.cfg.Timeout, func() { b.expire(p) })
	b.notifyLocked(Update{Type: UpdateQuestion, Question: &p.view})
	return p
}

// expire denies a question nobody answered in time.
func (b *Broker) expire(p *pending) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if _, ok := b.byID[p.view.ID]; !ok {
		return
	}
	d := Decision{Reason: fmt.Sprintf("nobody answered within %v", b.cfg.Timeout)}
	b.recordLocked(context.Background(), p.q, d, p.waiters)
	b.settleLocked(p, d, "timed out")
}

// settleLocked gives p its decision, releases its waiters and takes it off
// the prompters' screens.
func (b *Broker) settleLocked(p *pending, d Decision, why string) {
	if _, ok := b.byID[p.view.ID]; !ok {
		return
	}
	p.decision = d
	close(p.done)
	if p.timer != nil {
		p.timer.Stop()
	}
	delete(b.byID, p.view.ID)
	delete(b.pending, p.key)
	if i := slices.Index(b.queue, p); i >= 0 {
		b.queue = slices.Delete(b.queue, i, i+1)
	}
	b.notifyLocked(Update{Type: UpdateWithdrawn, ID: p.view.ID, Reason: why})
}

// Answer gives a person's answer to the waiting question id. An answer
// that creates a grant or a denial also settles every other waiting
// question of the same workspace, kind and scope.
func (b *Broker) Answer(ctx context.Context, id, choiceID string) (Decision, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	p := b.byID[id]
	if p == nil {
		return Decision{}, fmt.Errorf("question %s: %w", id, ErrNotPending)
	}
	c, ok := choice(p.q.Kind, choiceID)
	if !ok {
		var ids []string
		for _, c := range Choices(p.q.Kind) {
			ids = append(ids, c.ID)
		}
		return Decision{}, fmt.Errorf("question %s: no choice %q; the choices are %s", id, choiceID, strings.Join(ids, ", "))
	}
	d := Decision{Allow: c.Allow, Choice: c.ID, Reason: "answered: " + c.Label}
	if err := b.recordLocked(ctx, p.q, d, p.waiters); err != nil {
		// Unrecorded, the answer does not count; nor is it remembered.
		d = Decision{Reason: "the answer could not be recorded: " + err.Error()}
		b.settleLocked(p, d, "the answer could not be recorded")
		return d, nil
	}
	b.settleLocked(p, d, "answered")
	if c.Allow && c.For == 0 && !c.Session {
		return d, nil // allow once: nothing is remembered
	}
	now := b.cfg.Clock.Now()
	gid := b.nextID("g")
	g := &Grant{ID: gid, seq: b.seq, Kind: p.q.Kind, Workspace: p.q.Workspace, Scope: p.q.Scope, Allow: c.Allow, Choice: c.ID, Since: now}
	if !c.Session {
		g.Until = now.Add(c.For)
	}
	g.reason = "denied by a person's answer, remembered until " + until(g)
	if g.Allow {
		g.reason = "granted until " + until(g)
	}
	b.grants[p.key.grantKey] = g
	covered := Decision{Allow: c.Allow, Reason: "settled by the answer to " + id}
	for _, other := range slices.Clone(b.queue) {
		if other.key.grantKey == p.key.grantKey {
			b.settleLocked(other, covered, "settled by the answer to "+id)
		}
	}
	return d, nil
}

func (b *Broker) recordLocked(ctx context.Context, q Question, d Decision, waiting int) error {
	if b.cfg.Record == nil {
		return nil
	}
	return b.cfg.Record.RecordConsent(ctx, Record{Question: q, Allow: d.Allow, Choice: d.Choice, Reason: d.Reason, Waiting: waiting})
}

// Pending lists the waiting questions, oldest first.
func (b *Broker) Pending() []Pending {
	b.mu.Lock()
	defer b.mu.Unlock()
	out := make([]Pending, 0, len(b.queue))
	for _, p := range b.queue {
		out = append(out, p.view)
	}
	return out
}

// Approvals lists the live grants and remembered denials, oldest first.
func (b *Broker) Approvals() []Grant {
	b.mu.Lock()
	defer b.mu.Unlock()
	now := b.cfg.Clock.Now()
	out := make([]Grant, 0, len(b.grants))
	for k, g := range b.grants {
		if !g.live(now) {
			delete(b.grants, k)
			continue
		}
		out = append(out, *g)
	}
	slices.SortFunc(out, func(a, b Grant) int { return cmp.Or(a.Since.Compare(b.Since), cmp.Compare(a.seq, b.seq)) })
	return out
}

// Revoke ends the grant or remembered denial id; the next question of its
// scope is asked again.
func (b *Broker) Revoke(id string) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	for k, g := range b.grants {
		if g.ID == id {
			delete(b.grants, k)
			return nil
		}
	}
	return fmt.Errorf("no approval %q (guardctl approvals list shows them)", id)
}

// RevokeAll ends every grant and remembered denial and says how many.
func (b *Broker) RevokeAll() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	n := len(b.grants)
	clear(b.grants)
	return n
}
