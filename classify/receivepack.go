package classify

import (
	"bytes"
	"crypto/sha1"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/format/packfile"
	"github.com/go-git/go-git/v5/plumbing/protocol/packp"
	"github.com/go-git/go-git/v5/plumbing/protocol/packp/capability"
)

// Push is a classified git-receive-pack request.
type Push struct {
	Class  Class
	Reason string
	// Commands are the ref updates, "old new ref" as git sends them.
	Commands []*packp.Command
	// Capabilities the client asked for (report-status, side-band-64k...),
	// which a refusal must honour.
	Capabilities *capability.List
}

// MaxPushPrefix bounds how much of a push is read to classify it: the
// command list and the commits at the head of the pack. A push whose
// commits go past it cannot be proven a fast-forward.
const MaxPushPrefix = 8 << 20

// maxCommitSize bounds one commit object.
const maxCommitSize = 1 << 20

var errPrefixSpent = errors.New("the push's commits go past what is read to classify it")

// ReceivePack classifies a git-receive-pack request body, reading only its
// head: the pkt-line commands, then the pack's commits, which git writes
// before the trees and blobs. It stops at the first object that is not a
// commit, so a large pack streams through after it.
//
//   - a deletion (new id all zeros) is destructive;
//   - an update is a fast-forward only if walking the new tip's parents
//     inside the pack reaches the old tip; anything else may be a force
//     push, and is destructive;
//   - creating a ref is a write; a bare flush (git's probe before a large
//     push) carries no command and reads.
//
// body is read only through the returned error or success; the caller
// keeps what was read (see Tee) and replays it.
func ReceivePack(body io.Reader) Push {
	head := make([]byte, 5)
	n, _ := io.ReadFull(body, head)
	if n == 4 && string(head[:4]) == "0000" {
		return Push{Class: Read, Reason: "an empty receive-pack probe"}
	}
	req := packp.NewReferenceUpdateRequest()
	if err := req.Decode(io.MultiReader(bytes.NewReader(head[:n]), body)); err != nil {
		// git may still apply what guard cannot read: assume the worst.
		return Push{Class: Destructive, Reason: "the push's commands do not parse, so it may delete or rewrite refs: " + err.Error()}
	}
	p := Push{Class: Write, Commands: req.Commands, Capabilities: req.Capabilities}
	needPack := false
	for _, c := range req.Commands {
		switch {
		case c.New.IsZero():
			p.Class, p.Reason = Destructive, "deletes "+c.Name.String()
			return p
		case !c.Old.IsZero() && c.Old != c.New:
			needPack = true
		}
	}
	if !needPack {
		p.Reason = "creates " + refNames(req.Commands)
		return p
	}
	commits, err := packCommits(req.Packfile)
	for _, c := range req.Commands {
		if c.Old.IsZero() || c.Old == c.New {
			continue
		}
		if !reaches(commits, c.New, c.Old) {
			why := "the new tip's history in the pack does not reach the old tip"
			if err != nil {
				why = err.Error()
			}
			p.Class, p.Reason = Destructive, fmt.Sprintf("%s may be a force push: %s", c.Name, why)
			return p
		}
	}
	p.Reason = "fast-forwards " + refNames(req.Commands)
	return p
}

func refNames(cmds []*packp.Command) string {
	var names []string
	for _, c := range cmds {
		names = append(names, c.Name.String())
	}
	return strings.Join(names, ", ")
}

// reaches walks from tip through parents known from the pack, looking for
// target.
func reaches(commits map[plumbing.Hash][]plumbing.Hash, tip, target plumbing.Hash) bool {
	seen := map[plumbing.Hash]bool{}
	queue := []plumbing.Hash{tip}
	for len(queue) > 0 {
		h := queue[0]
		queue = queue[1:]
		if h == target {
			return true
		}
		if seen[h] {
			continue
		}
		seen[h] = true
		queue = append(queue, commits[h]...)
	}
	return false
}

// packCommits reads the commits at the head of a pack, with their
// parents, until the first object that is not a commit. Commits stored as
// deltas against commits already read are resolved; others end the scan.
func packCommits(pack io.Reader) (map[plumbing.Hash][]plumbing.Hash, error) {
	commits := map[plumbing.Hash][]plumbing.Hash{}
	if pack == nil {
		return commits, errors.New("the push has no pack")
	}
	s := packfile.NewScanner(pack)
	_, count, err := s.Header()
	if err != nil {
		return commits, fmt.Errorf("the pack does not parse: %w", err)
	}
	byOffset := map[int64][]byte{}
	byHash := map[plumbing.Hash][]byte{}
	var buf bytes.Buffer
	for range count {
		h, err := s.NextObjectHeader()
		if err != nil {
			return commits, fmt.Errorf("the pack does not parse: %w", err)
		}
		var base []byte
		switch h.Type {
		case plumbing.CommitObject:
		case plumbing.OFSDeltaObject:
			if base = byOffset[h.OffsetReference]; base == nil {
				return commits, nil // a delta of a tree or blob: the commits are over
			}
		case plumbing.REFDeltaObject:
			if base = byHash[h.Reference]; base == nil {
				return commits, nil
			}
		default:
			return commits, nil // trees, blobs and tags follow the commits
		}
		if h.Length > maxCommitSize {
			return commits, errors.New("a commit object is implausibly large")
		}
		buf.Reset()
		if _, _, err := s.NextObject(&buf); err != nil {
			return commits, fmt.Errorf("the pack does not parse: %w", err)
		}
		data := append([]byte(nil), buf.Bytes()...)
		if base != nil {
			if data, err = packfile.PatchDelta(base, data); err != nil {
				return commits, fmt.Errorf("a commit delta does not apply: %w", err)
			}
		}
		id := objectID(data)
		commits[id] = parents(data)
		byOffset[h.Offset] = data
		byHash[id] = data
	}
	return commits, nil
}

// objectID is a commit's SHA-1 object id.
func objectID(data []byte) plumbing.Hash {
	sum := sha1.New()
	sum.Write([]byte("commit " + strconv.Itoa(len(data)) + "\x00"))
	sum.Write(data)
	var h plumbing.Hash
	copy(h[:], sum.Sum(nil))
	return h
}

// parents reads a commit's parents the way git does: the "parent" lines
// that follow the "tree" line directly. A "parent" line anywhere else is
// an extra header git ignores, and must not prove a fast-forward.
func parents(data []byte) []plumbing.Hash {
	var out []plumbing.Hash
	first := true
	for len(data) > 0 {
		line := data
		if i := bytes.IndexByte(data, '\n'); i >= 0 {
			line, data = data[:i], data[i+1:]
		} else {
			data = nil
		}
		if first {
			if !bytes.HasPrefix(line, []byte("tree ")) {
				return nil
			}
			first = false
			continue
		}
		rest, ok := bytes.CutPrefix(line, []byte("parent "))
		if !ok || len(rest) != 40 {
			break
		}
		out = append(out, plumbing.NewHash(string(rest)))
	}
	return out
}

// ReceivePackRefusal is the answer that refuses every command of a push
// the way a server does: report-status "unpack ok" then "ng <ref>
// <reason>", on side band 1 when the client asked for side bands, with
// the reason also on band 2, so that git prints
// "! [remote rejected] <ref> (<reason>)" and exits 1.
func ReceivePackRefusal(p Push, reason string) []byte {
	reason = strings.Map(func(r rune) rune {
		if r < 0x20 || r == 0x7f {
			return ' '
		}
		return r
	}, reason)
	var report bytes.Buffer
	pkt(&report, "unpack ok\n")
	for _, c := range p.Commands {
		pkt(&report, "ng "+c.Name.String()+" "+reason+"\n")
	}
	report.WriteString("0000")
	var band byte
	switch {
	case p.Capabilities != nil && p.Capabilities.Supports(capability.Sideband64k):
		band = 1
	case p.Capabilities != nil && p.Capabilities.Supports(capability.Sideband):
		band = 2
	default:
		return report.Bytes()
	}
	max := 65515
	if band == 2 {
		max = 995
	}
	var out bytes.Buffer
	msg := []byte("guard: " + reason + "\n")
	pkt(&out, string(append([]byte{2}, msg[:min(len(msg), max)]...)))
	for b := report.Bytes(); len(b) > 0; {
		n := min(len(b), max)
		pkt(&out, string(append([]byte{1}, b[:n]...)))
		b = b[n:]
	}
	out.WriteString("0000")
	return out.Bytes()
}

// pkt writes one pkt-line.
func pkt(w *bytes.Buffer, payload string) {
	fmt.Fprintf(w, "%04x%s", len(payload)+4, payload)
}

// Tee records what a classifier reads from a body, up to a limit, so that
// it can be replayed upstream followed by the rest. Past the limit it
// reports errPrefixSpent, which classifiers treat as "cannot tell".
type Tee struct {
	R     io.Reader
	Limit int
	Buf   bytes.Buffer
}

func (t *Tee) Read(p []byte) (int, error) {
	if room := t.Limit - t.Buf.Len(); room <= 0 {
		return 0, errPrefixSpent
	} else if len(p) > room {
		p = p[:room]
	}
	n, err := t.R.Read(p)
	t.Buf.Write(p[:n])
	return n, err
}

// Detail describes a push for a person: each ref update with its ids.
func (p Push) Detail(path string) string {
	if len(p.Commands) == 0 {
		return "git push to " + path
	}
	var parts []string
	for _, c := range p.Commands {
		switch {
		case c.New.IsZero():
			parts = append(parts, "delete "+c.Name.String())
		case c.Old.IsZero():
			parts = append(parts, "create "+c.Name.String()+" at "+c.New.String()[:12])
		default:
			parts = append(parts, "update "+c.Name.String()+" "+c.Old.String()[:12]+".."+c.New.String()[:12])
		}
	}
	return "git push to " + path + ": " + strings.Join(parts, ", ")
}
