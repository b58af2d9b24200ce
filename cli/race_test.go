//go:build race

package cli

// raceDetector is whether the tests were built with -race.
const raceDetector = true
