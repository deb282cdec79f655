//go:build !race

package ec

const raceEnabled = false
