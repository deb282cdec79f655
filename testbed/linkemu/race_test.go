//go:build race

package linkemu_test

// raceDetector is true in a build with the race detector, which slows the
// emulator's Go code about tenfold.
const raceDetector = true

// raceSlowdown divides the frame rates of tests whose rate is not the
// point.
const raceSlowdown = 5
