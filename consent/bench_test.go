package consent

import (
	"context"
	"sync"
	"testing"
	"time"
)

// BenchmarkAskGranted is the hot path of every write under a grant: the
// ask is settled by the grant without a prompt.
func BenchmarkAskGranted(b *testing.B) {
	br := NewBroker(Config{})
	p := br.Attach()
	go func() {
		for u := range p.Updates() {
			if u.Type == UpdateQuestion {
				br.Answer(context.Background(), u.Question.ID, ChoiceSession)
			}
		}
	}()
	q := write("github", "POST /repos/o/r/issues")
	if !br.Ask(context.Background(), q).Allow {
		b.Fatal("no grant")
	}
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if !br.Ask(ctx, q).Allow {
			b.Fatal("denied")
		}
	}
}

// BenchmarkAnswerReleases1000 measures the time from an answer to the
// release of 1,000 requests waiting on the same question.
func BenchmarkAnswerReleases1000(b *testing.B) {
	const waiters = 1000
	for b.Loop() {
		b.StopTimer()
		br := NewBroker(Config{})
		p := br.Attach()
		var wg sync.WaitGroup
		var released sync.WaitGroup
		released.Add(waiters)
		var last time.Time
		var mu sync.Mutex
		for range waiters {
			wg.Go(func() {
				br.Ask(context.Background(), write("github", "DELETE /repos/o/r"))
				mu.Lock()
				last = time.Now()
				mu.Unlock()
				released.Done()
			})
		}
		u := <-p.Updates()
		for {
			br.mu.Lock()
			n := br.byID[u.Question.ID].waiters
			br.mu.Unlock()
			if n == waiters {
				break
			}
			time.Sleep(100 * time.Microsecond)
		}
		b.StartTimer()
		start := time.Now()
		br.Answer(context.Background(), u.Question.ID, ChoiceOnce)
		released.Wait()
		b.StopTimer()
		b.ReportMetric(float64(last.Sub(start).Microseconds())/1000, "ms-to-release-all")
		wg.Wait()
		p.Detach()
		b.StartTimer()
	}
}
