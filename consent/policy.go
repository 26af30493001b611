package consent

import "guard/classify"

// Mode is a service's write policy (DESIGN.md §Write policy); the values
// are the profile's.
type Mode string

const (
	Off           Mode = "off"
	PromptOnWrite Mode = "promptOnWrite"
	Destructive   Mode = "destructive"
	ReadOnly      Mode = "readOnly"
)

// Outcome is what a mode does with an operation.
type Outcome string

const (
	Allow Outcome = "allow"
	Ask   Outcome = "ask"
	Block Outcome = "block"
)

// Decide is the write-policy table. An unknown mode blocks everything but
// reads: a profile is validated before it gets here, so this is a bug, and
// failing closed is the safe side of it.
func Decide(m Mode, c classify.Class) Outcome {
	switch m {
	case Off:
		return Allow
	case PromptOnWrite:
		if c == classify.Read {
			return Allow
		}
		return Ask
	case Destructive:
		if c == classify.Destructive {
			return Block
		}
		return Allow
	}
	if c == classify.Read {
		return Allow
	}
	return Block
}
