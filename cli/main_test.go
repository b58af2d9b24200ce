package cli

import (
	"testing"

	"github.com/notifier/notifier/testenv"
)

// TestMain checks that the commands run in process (runCLI) leave no
// goroutine behind: every server, client and sampler they start stops with
// them. NOTIFIER_TEST_MEASURES=only runs the measuring tests alone
// (measure_test.go).
func TestMain(m *testing.M) {
	selectMeasuring()
	testenv.VerifyNoLeaks(m, testenv.DyingConnections...)
}
