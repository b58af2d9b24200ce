package fleet

import (
	"testing"

	"github.com/notifier/notifier/testenv"
)

func TestMain(m *testing.M) { testenv.VerifyNoLeaks(m, testenv.DyingConnections...) }
