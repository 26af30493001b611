package consent

import "context"

// Update types on a prompter's stream.
const (
	// UpdateQuestion: a question is waiting; show it.
	UpdateQuestion = "question"
	// UpdateWithdrawn: a question is settled; take it off the screen.
	UpdateWithdrawn = "withdrawn"
)

// Update is one change a prompter sees.
type Update struct {
	Type     string   `json:"type"`
	Question *Pending `json:"question,omitempty"`
	ID       string   `json:"id,omitempty"`
	Reason   string   `json:"reason,omitempty"`
}

// prompterBuffer is how far a prompter may fall behind before it is
// dropped: the broker never waits for a prompter.
const prompterBuffer = 4096

// Prompter is one attached front end (the headless prompt, a GUI). It sees
// every waiting question, then each new one and each withdrawal, in order.
type Prompter struct {
	b       *Broker
	updates chan Update
}

// Attach connects a prompter. Its stream starts with every question
// already waiting.
func (b *Broker) Attach() *Prompter {
	b.mu.Lock()
	defer b.mu.Unlock()
	p := &Prompter{b: b, updates: make(chan Update, prompterBuffer+maxPending)}
	for _, q := range b.queue {
		p.updates <- Update{Type: UpdateQuestion, Question: &q.view}
	}
	b.prompters[p] = struct{}{}
	return p
}

// Updates is the prompter's stream; it is closed when the prompter is
// detached, by Detach or because it fell too far behind.
func (p *Prompter) Updates() <-chan Update { return p.updates }

// Detach disconnects the prompter. When it was the last one, every waiting
// question is denied: nobody is left to answer.
func (p *Prompter) Detach() {
	b := p.b
	b.mu.Lock()
	defer b.mu.Unlock()
	b.detachLocked(p)
}

func (b *Broker) detachLocked(p *Prompter) {
	if _, ok := b.prompters[p]; !ok {
		return
	}
	delete(b.prompters, p)
	close(p.updates)
	if len(b.prompters) > 0 {
		return
	}
	d := Decision{Reason: "the prompter went away before answering"}
	for len(b.queue) > 0 {
		q := b.queue[0]
		b.recordLocked(context.Background(), q.q, d, q.waiters)
		b.settleLocked(q, d, "the prompter went away")
	}
}

// notifyLocked sends u to every prompter without blocking; one that has
// fallen behind is dropped.
func (b *Broker) notifyLocked(u Update) {
	var behind []*Prompter
	for p := range b.prompters {
		select {
		case p.updates <- u:
		default:
			behind = append(behind, p)
		}
	}
	for _, p := range behind {
		b.detachLocked(p)
	}
}
