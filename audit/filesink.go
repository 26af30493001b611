package audit

import (
	"errors"
	"fmt"
	"os"
	"sync"
)

// FileSink appends event lines to a file, rotating it by size: events.jsonl
// becomes events.jsonl.1, .1 becomes .2, and so on up to Keep old files.
type FileSink struct {
	path     string
	maxBytes int64
	keep     int

	mu     sync.Mutex
	f      *os.File
	size   int64 // bytes of whole lines in the file
	closed bool
}

// Rotation defaults.
const (
	DefaultMaxBytes = 16 << 20
	DefaultKeep     = 3
)

// OpenFile opens (creating, mode 0600) the event file at path. maxBytes and
// keep of 0 take the defaults.
func OpenFile(path string, maxBytes int64, keep int) (*FileSink, error) {
	if maxBytes <= 0 {
		maxBytes = DefaultMaxBytes
	}
	if keep <= 0 {
		keep = DefaultKeep
	}
	s := &FileSink{path: path, maxBytes: maxBytes, keep: keep}
	if err := s.open(); err != nil {
		return nil, err
	}
	return s, nil
}

func (s *FileSink) open() error {
	f, err := os.OpenFile(s.path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		return fmt.Errorf("event log: %w", err)
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return fmt.Errorf("event log: %w", err)
	}
	if !st.Mode().IsRegular() {
		f.Close()
		return fmt.Errorf("event log: %s is not a regular file", s.path)
	}
	s.f, s.size = f, st.Size()
	return nil
}

// Write appends one line, rotating first if the line would take the file
// past its size limit.
func (s *FileSink) Write(line []byte) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return errors.New("event log is closed")
	}
	if s.f == nil {
		// A rotation failed half-way; try again rather than deny forever.
		if err := s.open(); err != nil {
			return err
		}
	}
	if s.size > 0 && s.size+int64(len(line)) > s.maxBytes {
		if err := s.rotate(); err != nil {
			return err
		}
	}
	n, err := s.f.Write(line)
	if err != nil {
		// Cut a torn line off, so the next event does not land on the
		// same line and make both unreadable.
		if n > 0 {
			s.f.Truncate(s.size)
		}
		return fmt.Errorf("event log %s: %w", s.path, err)
	}
	s.size += int64(n)
	return nil
}

func (s *FileSink) rotate() error {
	if err := s.f.Close(); err != nil {
		return fmt.Errorf("event log rotation: %w", err)
	}
	s.f = nil
	for i := s.keep - 1; i >= 1; i-- {
		from := fmt.Sprintf("%s.%d", s.path, i)
		if err := os.Rename(from, fmt.Sprintf("%s.%d", s.path, i+1)); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("event log rotation: %w", err)
		}
	}
	if err := os.Rename(s.path, s.path+".1"); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("event log rotation: %w", err)
	}
	return s.open()
}

// Close closes the file.
func (s *FileSink) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	if s.f == nil {
		return nil
	}
	err := s.f.Close()
	s.f = nil
	return err
}
