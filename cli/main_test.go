package cli

import (
	"testing"

	"github.com/notifier/notifier/testenv"
)

// TestMain checks that the commands run in process (runCLI) leave no
// goroutine behind: every server, client and sampler they start stops with
// them.
func TestMain(m *testing.M) { testenv.VerifyNoLeaks(m, testenv.DyingConnections...) }
