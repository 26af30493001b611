package consent

import (
	"fmt"
	"time"
)

// Kind is what a question asks about.
type Kind string

const (
	// KindWrite asks whether a write (or destructive call) may go ahead.
	KindWrite Kind = "write"
	// KindUse asks whether a credential marked askBeforeUse may be used.
	KindUse Kind = "use"
)

// Question is what a person is asked.
type Question struct {
	Kind      Kind
	Workspace string
	// Scope is the protocol scope of a write ("github", "db:<host>",
	// "kube:<host>", "docker:<host>"), or a credential id for a use.
	Scope string
	// Subject is the credential's title, for a use question.
	Subject string
	// Operation is the exact operation: literal SQL, or "METHOD /path".
	Operation string
}

// Title is the question as a person reads it.
func (q Question) Title() string {
	if q.Kind == KindUse {
		return fmt.Sprintf("Allow %q to use credential %q?", q.Workspace, q.Subject)
	}
	return fmt.Sprintf("Allow write on %q from workspace %q?", q.Scope, q.Workspace)
}

// Choice is one answer a person can give.
type Choice struct {
	ID      string `json:"id"`
	Label   string `json:"label"`
	Default bool   `json:"default,omitempty"`
	Allow   bool   `json:"allow"`
	// For is how long an allow grants, or how long a denial is
	// remembered; zero with Session false means no grant (allow once).
	For     time.Duration `json:"-"`
	Session bool          `json:"-"`
}

// Choice ids, as prompters send them.
const (
	ChoiceOnce    = "once"
	ChoiceSession = "session"
	ChoiceDeny    = "deny"
)

var (
	writeChoices = []Choice{
		{ID: "15m", Label: "Allow for 15 minutes", Default: true, Allow: true, For: 15 * time.Minute},
		{ID: ChoiceOnce, Label: "Allow once", Allow: true},
		{ID: ChoiceSession, Label: "Allow for the rest of the session", Allow: true, Session: true},
		{ID: ChoiceDeny, Label: "Don't allow", For: 60 * time.Second},
	}
	useChoices = []Choice{
		{ID: "5m", Label: "Allow for 5 minutes", Default: true, Allow: true, For: 5 * time.Minute},
		{ID: "1h", Label: "Allow for 1 hour", Allow: true, For: time.Hour},
		{ID: ChoiceSession, Label: "Allow for the rest of the session", Allow: true, Session: true},
		{ID: ChoiceDeny, Label: "Don't allow", For: 5 * time.Minute},
	}
)

// Choices are the answers to a question of kind k, in the order they are
// shown; exactly one is the default.
func Choices(k Kind) []Choice {
	if k == KindUse {
		return useChoices
	}
	return writeChoices
}

func choice(k Kind, id string) (Choice, bool) {
	for _, c := range Choices(k) {
		if c.ID == id {
			return c, true
		}
	}
	return Choice{}, false
}

// Decision is the outcome of an Ask.
type Decision struct {
	Allow bool
	// Choice is the answer's choice id; empty when no person answered
	// this ask (a grant, a remembered denial, a timeout...).
	Choice string
	// Reason says how it was decided, for events and block bodies.
	Reason string
}
