//go:build race

package dispatch

// raceEnabled: the race detector slows every goroutine several times over,
// and a test's dispatchers, servers and fakes share two cores.
const raceEnabled = true
