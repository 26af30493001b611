package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/term"

	"guard/consent"
	"guard/control"
)

func newPromptCmd(c *cli) *cobra.Command {
	return &cobra.Command{
		Use:   "prompt",
		Short: "Answer consent questions: the headless prompt, for a tmux pane next to the agent",
		Long: `guardctl prompt attaches to guardd as a prompter and shows each question the
agent's requests are waiting on: the workspace, the scope, the exact operation,
and numbered choices. One key answers: 1-4, or Enter for the default (marked).
Ctrl-C denies the question on screen; with no question on screen it quits, as
do q and Ctrl-D. When several questions wait, the oldest is shown with the
count of the others.

While no prompt is attached, guardd denies every question at once; when the
last prompt quits, the questions still waiting are denied.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			client, err := c.client()
			if err != nil {
				return err
			}
			return runPrompt(cmd.Context(), client, os.Stdin, c.stdout)
		},
	}
}

// promptState is what the prompt shows: the waiting questions, oldest
// first, and the last thing that happened.
type promptState struct {
	questions []consent.Pending
	status    string
}

func (s *promptState) apply(u consent.Update) {
	switch u.Type {
	case consent.UpdateQuestion:
		s.questions = append(s.questions, *u.Question)
	case consent.UpdateWithdrawn:
		for i, q := range s.questions {
			if q.ID == u.ID {
				s.questions = append(s.questions[:i], s.questions[i+1:]...)
				if u.Reason != "answered" {
					s.status = fmt.Sprintf("%s was withdrawn: %s", q.Title, u.Reason)
				}
				break
			}
		}
	}
}

// renderPrompt draws the state for a width×height terminal. The operation
// gets whatever room the title and the choices leave; when it does not fit,
// its head is shown with the count of lines left out.
func renderPrompt(s *promptState, now time.Time, width, height int) string {
	width = max(width, 20)
	height = max(height, 8)
	var top, bottom []string
	add := func(to *[]string, text string) {
		for _, l := range wrap(text, width) {
			*to = append(*to, l)
		}
	}
	if len(s.questions) == 0 {
		add(&top, "guard: no questions waiting.")
		if s.status != "" {
			add(&top, "")
			add(&top, s.status)
		}
		add(&top, "")
		add(&top, "q quits; while no prompt runs, guardd denies every question.")
		return strings.Join(top, "\r\n") + "\r\n"
	}
	q := s.questions[0]
	head := "guard: workspace " + q.Workspace
	if n := len(s.questions) - 1; n > 0 {
		head += fmt.Sprintf(" · %d more waiting", n)
	}
	add(&top, head)
	add(&top, "")
	add(&top, q.Title)
	add(&top, fmt.Sprintf("(%s; denied in %v unless answered)", q.Kind, max(q.Deadline.Sub(now).Round(time.Second), 0)))
	add(&top, "")
	add(&bottom, "")
	for i, c := range q.Choices {
		l := fmt.Sprintf("  %d) %s", i+1, c.Label)
		if c.Default {
			l += "   [Enter]"
		}
		bottom = append(bottom, fit(l, width))
	}
	add(&bottom, "")
	add(&bottom, "1-4 answers, Enter the default; Ctrl-C denies.")
	if s.status != "" {
		add(&bottom, s.status)
	}
	op := wrap(q.Operation, width-2)
	if room := height - len(top) - len(bottom) - 1; len(op) > room {
		keep := max(room-1, 1)
		op = append(op[:keep], fmt.Sprintf("… (%d more lines)", len(op)-keep))
	}
	lines := top
	for _, l := range op {
		lines = append(lines, fit("  "+l, width))
	}
	lines = append(lines, bottom...)
	return strings.Join(lines, "\r\n") + "\r\n"
}

// fit cuts a line to the terminal's width.
func fit(s string, width int) string {
	r := []rune(s)
	if len(r) <= width {
		return s
	}
	return string(r[:width-1]) + "…"
}

// wrap breaks text into lines of at most width runes, keeping its own line
// breaks; control characters are shown escaped, so an operation cannot
// repaint the screen.
func wrap(text string, width int) []string {
	width = max(width, 10)
	var out []string
	for _, line := range strings.Split(text, "\n") {
		r := []rune(strings.Map(func(c rune) rune {
			if c < 0x20 && c != '\t' || c == 0x7f || (c >= 0x80 && c < 0xa0) {
				return '�'
			}
			if c == '\t' {
				return ' '
			}
			return c
		}, line))
		for len(r) > width {
			out = append(out, string(r[:width]))
			r = r[width:]
		}
		out = append(out, string(r))
	}
	return out
}

// key is one key press, or the end of input.
type key struct {
	b   byte
	eof bool
}

// runPrompt is the prompt's loop: updates from guardd, key presses, the
// terminal's size, and a clock for the countdown.
func runPrompt(ctx context.Context, client *control.Client, in *os.File, out io.Writer) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	fd := int(in.Fd())
	tty := term.IsTerminal(fd)
	if tty {
		old, err := term.MakeRaw(fd)
		if err != nil {
			return fmt.Errorf("terminal: %w", err)
		}
		defer term.Restore(fd, old)
		// Raw mode turns off the terminal's own signals: Ctrl-C arrives as
		// a key. A SIGINT from elsewhere still quits.
		fmt.Fprint(out, "\x1b[?25l") // hide the cursor
		defer fmt.Fprint(out, "\x1b[?25h\r\n")
	}
	updates := make(chan consent.Update, 64)
	streamErr := make(chan error, 1)
	go func() {
		streamErr <- client.ConsentStream(ctx, func(u consent.Update) error {
			select {
			case updates <- u:
				return nil
			case <-ctx.Done():
				return ctx.Err()
			}
		})
	}()
	keys := make(chan key, 16)
	go readKeys(in, tty, keys)
	winch := make(chan os.Signal, 1)
	signal.Notify(winch, syscall.SIGWINCH)
	defer signal.Stop(winch)
	tick := time.NewTicker(time.Second)
	defer tick.Stop()

	s := &promptState{}
	draw := func() {
		w, h := 80, 24
		if tty {
			if tw, th, err := term.GetSize(fd); err == nil {
				w, h = tw, th
			}
		}
		fmt.Fprint(out, "\x1b[H\x1b[2J"+renderPrompt(s, time.Now(), w, h))
	}
	draw()
	for {
		select {
		case <-ctx.Done():
			return nil
		case err := <-streamErr:
			if err != nil && ctx.Err() == nil {
				return fmt.Errorf("lost guardd: %w", err)
			}
			return nil
		case u := <-updates:
			s.apply(u)
		case <-winch:
		case <-tick.C:
			if len(s.questions) == 0 {
				continue
			}
		case k := <-keys:
			if quit := handleKey(ctx, client, s, k); quit {
				return nil
			}
		}
		draw()
	}
}

// handleKey acts on one key press; true means quit.
func handleKey(ctx context.Context, client *control.Client, s *promptState, k key) bool {
	if len(s.questions) == 0 {
		return k.eof || k.b == 'q' || k.b == 0x03 || k.b == 0x04
	}
	q := s.questions[0]
	choice := ""
	switch {
	case k.eof:
		return true // the questions are denied when the prompt detaches
	case k.b == 0x03: // Ctrl-C
		choice = consent.ChoiceDeny
	case k.b == '\r' || k.b == '\n':
		for _, c := range q.Choices {
			if c.Default {
				choice = c.ID
			}
		}
	case k.b >= '1' && int(k.b-'1') < len(q.Choices):
		choice = q.Choices[k.b-'1'].ID
	default:
		return false
	}
	res, err := client.Answer(ctx, q.ID, choice)
	var rej *control.RejectedError
	switch {
	case errors.As(err, &rej):
		s.status = "too late: " + rej.Body.Error
	case err != nil:
		s.status = "the answer did not reach guardd: " + err.Error()
	default:
		verb := "denied"
		if res.Allow {
			verb = "allowed"
		}
		s.status = fmt.Sprintf("%s %s (%s)", verb, q.Operation, res.Reason)
	}
	return false
}

// readKeys sends key presses: single bytes from a raw terminal, or one
// per line from a pipe (an empty line is Enter).
func readKeys(in io.Reader, tty bool, keys chan<- key) {
	if tty {
		buf := make([]byte, 64)
		for {
			n, err := in.Read(buf)
			for _, b := range buf[:n] {
				keys <- key{b: b}
			}
			if err != nil {
				keys <- key{eof: true}
				return
			}
		}
	}
	sc := bufio.NewScanner(in)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		switch {
		case line == "":
			keys <- key{b: '\n'}
		default:
			keys <- key{b: line[0]}
		}
	}
	keys <- key{eof: true}
}
