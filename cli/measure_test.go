package cli

import (
	"flag"
	"slices"
	"strings"
	"testing"

	"github.com/notifier/notifier/testenv"
)

// measuringTests are the package's tests that measure a promise at a fake
// provider from arrival times through `notifier run` processes (a cap's
// windows, a contract's, a slot explain named, the pacing bench's), or
// wait out a paced run (the status page's 20 s of samples). Their CPU is
// the binaries' and the servers', not this package's code, so -race adds
// nothing to them but load: make test runs them in its measure step,
// without -race, beside dispatch's (make measure). In a loaded race step
// a cap's arrivals fell 160 ms behind their decisions, and a probe took a
// slot 7 ms before the one explain named (a backlog job woken past its
// late tolerance gives its slot back). Each calls measures.
var measuringTests = []string{
	"TestBenchPacing",
	"TestContractHeldWhileAWorkerStalls",
	"TestExplainProviderQueue",
	"TestExplainUserAtTheCap",
	"TestKilledWorkerLosesNothing",
	"TestReloadOnFileChangeAndSIGHUP",
	"TestSIGTERMStopsCleanly",
	"TestStatusScreenshot",
	"TestUserCapScenario",
}

// measures skips t under -race unless NOTIFIER_TEST_MEASURES=all, and
// fails a test that calls it without being among measuringTests (which
// make measure selects them by).
func measures(t *testing.T) {
	t.Helper()
	name, _, _ := strings.Cut(t.Name(), "/")
	if !slices.Contains(measuringTests, name) {
		t.Fatalf("%s measures but is not in measuringTests: make measure would never run it", name)
	}
	v, err := testenv.TestsToRun()
	if err != nil {
		t.Fatal(err)
	}
	if v == "" && raceDetector {
		t.Skip("measures: make test runs it without -race (make measure); NOTIFIER_TEST_MEASURES=all runs it under -race too")
	}
}

// selectMeasuring makes NOTIFIER_TEST_MEASURES=only run the measuring
// tests alone (unless -run already chose), as make measure asks.
func selectMeasuring() {
	flag.Parse()
	if v, _ := testenv.TestsToRun(); v != "only" || flag.Lookup("test.run").Value.String() != "" {
		return
	}
	_ = flag.Set("test.run", "^("+strings.Join(measuringTests, "|")+")$")
}
