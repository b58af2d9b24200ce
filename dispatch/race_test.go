//go:build race

package dispatch

// raceDetector is whether the tests were built with -race.
const raceDetector = true
