package audit

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

func quietLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

func fixedNow() time.Time { return time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC) }

func TestEventsAreJSONLines(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "events.jsonl")
	sink, err := OpenFile(path, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	l := New("demo", sink, Options{Now: fixedNow, Logger: quietLogger()})
	ctx := context.Background()
	want := Event{Type: TypeFirewall, Action: "deny", Layer: LayerL4, Proto: "tcp", IP: "10.0.0.1", Port: 22,
		Rule: &Rule{Line: 5, Text: "deny any 10.0.0.0/8", Origin: "rules"}}
	if err := l.Emit(ctx, want); err != nil {
		t.Fatal(err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	st, _ := os.Stat(path)
	if st.Mode().Perm() != 0o600 {
		t.Errorf("event file mode %v, want 0600", st.Mode().Perm())
	}
	b, _ := os.ReadFile(path)
	const line = `{"time":"2026-11-30T12:00:00Z","workspace":"demo","type":"egress.firewall","action":"deny","layer":"l4","proto":"tcp","ip":"10.0.0.1","port":22,"rule":{"line":5,"text":"deny any 10.0.0.0/8","origin":"rules"}}` + "\n"
	if string(b) != line {
		t.Fatalf("got  %s\nwant %s", b, line)
	}
	if err := l.Emit(ctx, want); err == nil {
		t.Fatal("emit after close succeeded")
	}
}

func TestRotationBySize(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "events.jsonl")
	sink, err := OpenFile(path, 1000, 2)
	if err != nil {
		t.Fatal(err)
	}
	l := New("w", sink, Options{Now: fixedNow, Logger: quietLogger()})
	for i := range 100 {
		if err := l.Emit(context.Background(), Event{Type: TypePolicyChange, Reason: fmt.Sprintf("change %03d", i)}); err != nil {
			t.Fatal(err)
		}
	}
	l.Close()
	var lines int
	for _, name := range []string{path, path + ".1", path + ".2"} {
		f, err := os.Open(name)
		if err != nil {
			t.Fatal(err)
		}
		st, _ := f.Stat()
		if st.Size() > 1000 {
			t.Errorf("%s is %d bytes, over the limit", name, st.Size())
		}
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			var e Event
			if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
				t.Fatalf("%s: torn line %q", name, sc.Text())
			}
			lines++
		}
		f.Close()
	}
	if _, err := os.Stat(path + ".3"); !errors.Is(err, os.ErrNotExist) {
		t.Error("kept more old files than asked")
	}
	if lines == 0 || lines >= 100 {
		t.Errorf("%d lines across files; rotation should have dropped the oldest", lines)
	}
	// The newest event is in the live file.
	b, _ := os.ReadFile(path)
	if !bytes.HasSuffix(b, []byte(`"reason":"change 099"}`+"\n")) {
		t.Fatalf("live file does not end with the newest event: %q", b)
	}
}

type failingSink struct{}

func (failingSink) Write([]byte) error { return errors.New("disk full") }
func (failingSink) Close() error       { return nil }

func TestWriteFailureIsReported(t *testing.T) {
	l := New("w", failingSink{}, Options{Logger: quietLogger()})
	if err := l.Emit(context.Background(), Event{Type: TypeFirewall}); err == nil {
		t.Fatal("a failed write must be an error so that callers deny")
	}
	if len(l.Recent(0)) != 0 || l.Total() != 0 {
		t.Fatal("an unrecorded event must not appear in the ring")
	}
}

func TestRingAndSubscribers(t *testing.T) {
	l := New("w", nopSink{}, Options{RingSize: 4, Now: fixedNow, Logger: quietLogger()})
	sub := l.Subscribe(2)
	ctx := context.Background()
	for i := range 6 {
		l.Emit(ctx, Event{Type: TypeFirewall, Port: i + 1})
	}
	recent := l.Recent(0)
	if len(recent) != 4 || recent[0].Port != 3 || recent[3].Port != 6 {
		t.Fatalf("ring: %+v", recent)
	}
	if got := l.Recent(2); len(got) != 2 || got[0].Port != 5 {
		t.Fatalf("Recent(2): %+v", got)
	}
	if e := <-sub.Events(); e.Port != 1 {
		t.Fatalf("first event %d", e.Port)
	}
	if d := sub.TakeDropped(); d != 4 {
		t.Fatalf("dropped %d, want 4 (buffer of 2, 6 events)", d)
	}
	sub.Close()
	sub.Close()
	l.Close()
	if _, ok := <-l.Subscribe(1).Events(); ok {
		t.Fatal("subscription to a closed log is open")
	}
}

type nopSink struct{}

func (nopSink) Write([]byte) error { return nil }
func (nopSink) Close() error       { return nil }

// TestTornWriteIsCutOff makes a real short write (a file size limit, as
// when a disk fills): the failed event must be reported and its half line
// cut off, so that the next event is not glued to it.
func TestTornWriteIsCutOff(t *testing.T) {
	path := filepath.Join(t.TempDir(), "events.jsonl")
	sink, err := OpenFile(path, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer sink.Close()
	first := []byte(`{"a":1}` + "\n")
	if err := sink.Write(first); err != nil {
		t.Fatal(err)
	}
	var old syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_FSIZE, &old); err != nil {
		t.Fatal(err)
	}
	signal.Ignore(syscall.SIGXFSZ)
	defer signal.Reset(syscall.SIGXFSZ)
	limit := syscall.Rlimit{Cur: uint64(len(first) + 5), Max: old.Max}
	if err := syscall.Setrlimit(syscall.RLIMIT_FSIZE, &limit); err != nil {
		t.Fatal(err)
	}
	werr := sink.Write([]byte(`{"torn":"this line does not fit"}` + "\n"))
	if err := syscall.Setrlimit(syscall.RLIMIT_FSIZE, &old); err != nil {
		t.Fatal(err)
	}
	if werr == nil {
		t.Fatal("a short write was reported as recorded")
	}
	if err := sink.Write([]byte(`{"b":2}` + "\n")); err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(path)
	if string(b) != `{"a":1}`+"\n"+`{"b":2}`+"\n" {
		t.Fatalf("file: %q", b)
	}
}

func TestEventFileMustBeRegular(t *testing.T) {
	dir := t.TempDir()
	if err := os.Mkdir(filepath.Join(dir, "events.jsonl"), 0o700); err != nil {
		t.Fatal(err)
	}
	if _, err := OpenFile(filepath.Join(dir, "events.jsonl"), 0, 0); err == nil {
		t.Fatal("opened a directory as the event log")
	}
}
