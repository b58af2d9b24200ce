package ledger

import (
	"testing"

	"github.com/notifier/notifier/testenv"
)

func TestMain(m *testing.M) { testenv.VerifyNoLeaks(m) }
