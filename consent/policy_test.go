package consent

import (
	"flag"
	"fmt"
	"os"
	"strings"
	"testing"

	"guard/classify"
)

var update = flag.Bool("update", false, "rewrite golden files")

// TestModeTable checks the whole write-policy table against DESIGN.md's,
// kept as a golden file.
func TestModeTable(t *testing.T) {
	var b strings.Builder
	classes := []classify.Class{classify.Read, classify.Write, classify.Destructive, classify.Unknown}
	fmt.Fprintf(&b, "%-14s", "mode")
	for _, c := range classes {
		fmt.Fprintf(&b, " %-12s", c)
	}
	b.WriteString("\n")
	for _, m := range []Mode{Off, PromptOnWrite, Destructive, ReadOnly, "bogus"} {
		fmt.Fprintf(&b, "%-14s", m)
		for _, c := range classes {
			fmt.Fprintf(&b, " %-12s", Decide(m, c))
		}
		b.WriteString("\n")
	}
	golden := "testdata/modes.golden"
	if *update {
		os.WriteFile(golden, []byte(b.String()), 0o644)
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatal(err)
	}
	if b.String() != string(want) {
		t.Fatalf("mode table:\n%s\nwant:\n%s", b.String(), want)
	}
}
