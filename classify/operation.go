package classify

// Class is what an operation does.
type Class string

const (
	Read        Class = "read"
	Write       Class = "write"
	Destructive Class = "destructive"
	// Unknown: the classifier could not tell; the mode table decides.
	Unknown Class = "unknown"
)

// Operation is one classified call.
type Operation struct {
	// Service is the write-policy service: "github", "aws", "db:<host>"...
	Service string
	// Scope is what grants are kept under: the service, or a
	// per-host scope such as "kube:<host>".
	Scope string
	Class Class
	// Detail is the exact operation for a person to read: "METHOD /path",
	// or the literal statement.
	Detail string
	// Reason says why the class was chosen, for the event log.
	Reason string
}
