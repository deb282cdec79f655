//go:build race

package ec

// raceEnabled: the race detector makes sync.Pool drop items at random, so
// allocation counts through the reedsolomon library are not reproducible.
const raceEnabled = true
