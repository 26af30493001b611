// Package audit owns guard's security timeline (DESIGN.md §Events): the
// Event record, the JSON-lines file in the state directory with rotation by
// size, the in-memory ring that guardctl events reads, and live
// subscriptions for guardctl events --follow.
//
// Writing is fail-closed by contract: Emit returns an error when the event
// could not be written, and callers turn the decision it recorded into a
// deny. Subscribers never slow the writer: a subscriber that falls behind
// loses events and is told how many.
package audit
