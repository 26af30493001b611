package audit

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"sync"
	"time"
)

// Sink stores event lines durably. FileSink is the real one; tests inject
// failing ones.
type Sink interface {
	Write(line []byte) error
	Close() error
}

// Options configure a Log. Zero fields take the defaults.
type Options struct {
	// RingSize is how many recent events guardctl events can show (default
	// 1024).
	RingSize int
	// Now is the clock (default time.Now).
	Now func() time.Time
	// Logger receives write failures (default slog.Default()).
	Logger *slog.Logger
}

// Log is a workspace's event timeline. Safe for concurrent use.
type Log struct {
	workspace string
	sink      Sink
	now       func() time.Time
	logger    *slog.Logger

	mu     sync.Mutex
	ring   []Event
	next   int // ring slot for the next event
	filled bool
	total  uint64
	subs   map[*Subscription]struct{}
	closed bool
}

// New returns a Log writing to sink.
func New(workspace string, sink Sink, opts Options) *Log {
	if opts.RingSize <= 0 {
		opts.RingSize = 1024
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	return &Log{
		workspace: workspace,
		sink:      sink,
		now:       opts.Now,
		logger:    opts.Logger,
		ring:      make([]Event, opts.RingSize),
		subs:      map[*Subscription]struct{}{},
	}
}

// Emit stamps e with the time and workspace and writes it. An error means
// the event is not on record: the caller must fail closed (deny what the
// event was about). The cause is also logged.
func (l *Log) Emit(ctx context.Context, e Event) error {
	if e.Time.IsZero() {
		e.Time = l.now().UTC()
	}
	e.Workspace = l.workspace
	line, err := json.Marshal(e)
	if err != nil {
		return fmt.Errorf("encode event: %w", err)
	}
	line = append(line, '\n')

	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		err = fmt.Errorf("event log is closed")
	} else {
		err = l.sink.Write(line)
	}
	if err != nil {
		l.logger.ErrorContext(ctx, "event not recorded; failing closed", "type", e.Type, "err", err)
		return err
	}
	l.ring[l.next] = e
	l.next = (l.next + 1) % len(l.ring)
	if l.next == 0 {
		l.filled = true
	}
	l.total++
	for s := range l.subs {
		s.offer(e)
	}
	return nil
}

// Recent returns up to n of the latest events, oldest first. n <= 0 means
// all that the ring holds.
func (l *Log) Recent(n int) []Event {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.recentLocked(n)
}

func (l *Log) recentLocked(n int) []Event {
	var out []Event
	if l.filled {
		out = append(out, l.ring[l.next:]...)
	}
	out = append(out, l.ring[:l.next]...)
	if n > 0 && len(out) > n {
		out = out[len(out)-n:]
	}
	return out
}

// Total is the number of events recorded since the log was created.
func (l *Log) Total() uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.total
}

// Subscription receives events as they are recorded.
type Subscription struct {
	log     *Log
	ch      chan Event
	mu      sync.Mutex
	dropped uint64
	done    bool
}

// Subscribe returns a subscription buffering up to buf events.
func (l *Log) Subscribe(buf int) *Subscription {
	_, s := l.Follow(0, buf)
	return s
}

// Follow returns up to backlog of the latest events and a subscription to
// the ones after them, taken together so that no event is missed or seen
// twice.
func (l *Log) Follow(backlog, buf int) ([]Event, *Subscription) {
	if buf <= 0 {
		buf = 256
	}
	var recent []Event
	s := &Subscription{log: l, ch: make(chan Event, buf)}
	l.mu.Lock()
	defer l.mu.Unlock()
	if backlog > 0 {
		recent = l.recentLocked(backlog)
	}
	if l.closed {
		s.done = true
		close(s.ch)
		return recent, s
	}
	l.subs[s] = struct{}{}
	return recent, s
}

// offer delivers without blocking; called with the log's lock held.
func (s *Subscription) offer(e Event) {
	select {
	case s.ch <- e:
	default:
		s.mu.Lock()
		s.dropped++
		s.mu.Unlock()
	}
}

// Events is closed when the subscription or the log is closed.
func (s *Subscription) Events() <-chan Event { return s.ch }

// TakeDropped returns how many events were lost since the last call because
// the reader fell behind.
func (s *Subscription) TakeDropped() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	d := s.dropped
	s.dropped = 0
	return d
}

// Close ends the subscription.
func (s *Subscription) Close() {
	s.log.mu.Lock()
	defer s.log.mu.Unlock()
	if s.done {
		return
	}
	s.done = true
	delete(s.log.subs, s)
	close(s.ch)
}

// Close ends every subscription and closes the sink. Later Emits fail.
func (l *Log) Close() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return nil
	}
	l.closed = true
	for s := range l.subs {
		s.done = true
		close(s.ch)
	}
	clear(l.subs)
	return l.sink.Close()
}
