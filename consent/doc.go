// Package consent asks a person, while the agent's request waits, whether
// a write or the use of a credential may go ahead, and remembers the
// answer for as long as the person chose.
//
// The model: a caller (the proxy's guardrails hook) asks the Broker a
// Question and blocks until it is decided. A live grant or a remembered
// denial for the question's workspace, kind and scope decides at once;
// otherwise the question is queued for the attached prompters (the
// headless `guardctl prompt`, or a graphical front end on the control
// socket's JSON stream), which see every pending question and answer by
// id. Identical concurrent questions (same kind, workspace, scope and
// operation) share one prompt; an answer that creates a grant, or a
// denial, settles every waiting question of that scope.
//
// Everything fails closed: no prompter, no answer within the timeout, the
// last prompter leaving, the request's own context ending, or an answer
// that cannot be recorded all deny. Grants live in memory only and end
// with the process. Time comes from an injected Clock, so tests never
// sleep.
//
// The package also holds the write-policy table (Decide): which class of
// operation each mode allows, asks about or blocks. It knows nothing of
// HTTP and does no I/O beyond the Recorder it is given.
package consent
