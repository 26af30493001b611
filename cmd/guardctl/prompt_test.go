package main

import (
	"os"
	"strings"
	"testing"
	"time"

	"guard/consent"
)

// TestRenderPrompt draws the prompt's screens at several terminal sizes and
// compares them with golden files.
func TestRenderPrompt(t *testing.T) {
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	question := func(id, scope, op string) consent.Pending {
		q := consent.Question{Kind: consent.KindWrite, Workspace: "demo", Scope: scope, Operation: op}
		return consent.Pending{ID: id, Kind: q.Kind, Workspace: q.Workspace, Scope: scope, Title: q.Title(), Operation: op,
			Choices: consent.Choices(q.Kind), Asked: now, Deadline: now.Add(42 * time.Second)}
	}
	sql := "DELETE FROM orders\nWHERE created < now() - interval '30 days'\n  AND status = 'archived'\nRETURNING id, customer_id, total, created, status, notes, shipping_address"
	for _, tc := range []struct {
		name          string
		state         promptState
		width, height int
	}{
		{"idle", promptState{}, 80, 24},
		{"idle-after-timeout", promptState{status: `Allow write on "github" from workspace "demo"? was withdrawn: timed out`}, 80, 24},
		{"one", promptState{questions: []consent.Pending{question("q1", "github", "DELETE /repos/acme/site")}}, 80, 24},
		{"queue-narrow", promptState{questions: []consent.Pending{question("q2", "db:pg.internal", sql), question("q3", "github", "POST /x")},
			status: "allowed POST /repos/acme/site/issues (answered: Allow once)"}, 40, 24},
		{"queue-short", promptState{questions: []consent.Pending{question("q2", "db:pg.internal", sql)}}, 60, 15},
		{"escapes", promptState{questions: []consent.Pending{question("q4", "github", "POST /a\x1b[2J\x1b]0;owned\x07\rb")}}, 80, 24},
		{"use", promptState{questions: []consent.Pending{{ID: "q5", Kind: consent.KindUse, Workspace: "demo", Scope: "gh",
			Title: consent.Question{Kind: consent.KindUse, Workspace: "demo", Subject: "GitHub"}.Title(), Operation: "GET /user",
			Choices: consent.Choices(consent.KindUse), Deadline: now.Add(time.Minute)}}}, 80, 24},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := strings.ReplaceAll(renderPrompt(&tc.state, now, tc.width, tc.height), "\r\n", "\n")
			for _, l := range strings.Split(got, "\n") {
				if len([]rune(l)) > tc.width {
					t.Errorf("line wider than %d: %q", tc.width, l)
				}
				if strings.ContainsAny(l, "\x1b\x07\r") {
					t.Errorf("control characters reach the terminal: %q", l)
				}
			}
			golden := "testdata/prompt-" + tc.name + ".golden"
			if *update {
				os.WriteFile(golden, []byte(got), 0o644)
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatal(err)
			}
			if got != string(want) {
				t.Fatalf("got:\n%s\nwant:\n%s", got, want)
			}
		})
	}
}
