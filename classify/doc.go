// Package classify tells what a request to a known service does: it turns
// a request (or a protocol message) into an Operation — the service, the
// scope its write policy is kept under, and its class: read, write,
// destructive, or unknown when the classifier cannot tell. Unknown is an
// answer, not an error: the write-policy table decides what it means.
//
// Classifiers are pure functions of what they are given; they decide no
// policy and do no I/O.
package classify
