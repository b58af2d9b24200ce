//go:build race

package dispatch

// raceDetector is whether the tests were built with -race.
const raceDetector = true

// measuringPlaces is how many tests that measure run at once (measures):
// under -race, whose detector takes half of such a test's CPU, two.
const measuringPlaces = 2
