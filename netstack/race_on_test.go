//go:build race

package netstack

// raceEnabled: the race detector allows at most 8128 live goroutines.
const raceEnabled = true
