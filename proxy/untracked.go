package proxy

import (
	"bytes"
	"context"
	"fmt"
	"unsafe"

	"guard/audit"
)

// Real-looking secrets that guard did not issue: the VM should hold only
// fakes, so one of these on the wire means a real secret got into the VM.
// Each is found by its fixed prefix, then checked for its shape.
var untrackedKinds = []struct {
	kind, prefix string
	// tail is how many characters of alphabet must follow the prefix.
	tail     int
	alphabet func(byte) bool
}{
	{"AWS access key", "AKIA", 16, upperDigit},
	{"AWS temporary access key", "ASIA", 16, upperDigit},
	{"GitHub token", "ghp_", 36, alnum},
	{"GitHub fine-grained token", "github_pat_", 22, alnum},
	{"GitLab token", "glpat-", 20, alnumDash},
	{"private key", "-----BEGIN ", 0, nil}, // checked below
}

func upperDigit(c byte) bool { return ('A' <= c && c <= 'Z') || ('0' <= c && c <= '9') }
func alnum(c byte) bool      { return upperDigit(c) || ('a' <= c && c <= 'z') }
func alnumDash(c byte) bool  { return alnum(c) || c == '-' || c == '_' }

// untracked finds a real-looking secret in text that is not one of this
// install's fakes, and says what kind it is.
func (s *Swapper) untracked(text []byte) string {
	for _, k := range untrackedKinds {
		for from := 0; ; {
			i := bytes.Index(text[from:], []byte(k.prefix))
			if i < 0 {
				break
			}
			at := from + i
			from = at + 1
			if k.alphabet == nil {
				// -----BEGIN ... PRIVATE KEY-----
				line := text[at:min(len(text), at+64)]
				if j := bytes.IndexByte(line[1:], '\n'); j >= 0 {
					line = line[:j+1]
				}
				if bytes.Contains(line, []byte("PRIVATE KEY-----")) {
					return k.kind
				}
				continue
			}
			end := at + len(k.prefix) + k.tail
			if end > len(text) || (at > 0 && alnum(text[at-1])) {
				continue
			}
			ok := true
			for _, c := range text[at+len(k.prefix) : end] {
				ok = ok && k.alphabet(c)
			}
			if !ok {
				continue
			}
			candidate := unsafe.String(unsafe.SliceData(text[at:end]), end-at)
			if s.isFakePrefix(candidate) {
				continue
			}
			return k.kind
		}
	}
	return ""
}

// isFakePrefix says text begins one of this install's fakes.
func (s *Swapper) isFakePrefix(text string) bool {
	for _, c := range s.creds {
		for _, f := range []string{c.Fake, c.FakeKeyID} {
			if f != "" && len(text) <= len(f) && f[:len(text)] == text {
				return true
			}
		}
	}
	return false
}

// flagUntracked records a real-looking secret guard did not issue, and
// says whether the profile wants such requests refused.
func (s *Swapper) flagUntracked(ctx context.Context, kind, host, where string) *Block {
	reason := fmt.Sprintf("a real-looking %s that guard did not issue was sent to %s in the %s: a real secret may be in the VM", kind, host, where)
	action := "flag"
	if s.BlockUntracked {
		action = "deny"
	}
	s.events.Emit(ctx, audit.Event{Type: audit.TypeCompromise, Action: action, Host: host, Reason: reason})
	if !s.BlockUntracked {
		return nil
	}
	return compromiseBlock(reason)
}
