package daemon

import (
	"slices"

	"guard/control"
	"guard/rules"
)

// summarize says what changed between two policies, in canonical rule text:
// rules added and removed (as multisets), and whether the same rules were
// reordered, which matters because the first match wins.
func summarize(before, after *rules.Policy) control.ApplyResult {
	res := control.ApplyResult{Rules: len(after.Rules), Default: after.Default.String(), DefaultBefore: before.Default.String()}
	old := texts(before)
	cur := texts(after)
	count := map[string]int{}
	for _, t := range old {
		count[t]++
	}
	for _, t := range cur {
		if count[t] > 0 {
			count[t]--
			continue
		}
		res.Added = append(res.Added, t)
	}
	for _, t := range old {
		if count[t] > 0 {
			count[t]--
			res.Removed = append(res.Removed, t)
		}
	}
	if len(res.Added) == 0 && len(res.Removed) == 0 && !slices.Equal(old, cur) {
		res.Reordered = true
	}
	return res
}

func texts(p *rules.Policy) []string {
	out := make([]string, len(p.Rules))
	for i := range p.Rules {
		out[i] = rules.FormatRule(&p.Rules[i])
	}
	return out
}
