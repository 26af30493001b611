// Package e2e runs the real guardd and guardctl binaries against each other:
// hot rules swaps, SIGHUP reloads, graceful stops, bad input, and the
// command-line contract that scripts depend on.
package e2e
