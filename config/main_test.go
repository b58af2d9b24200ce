package config

import (
	"testing"

	"github.com/notifier/notifier/testenv"
)

// TestMain checks that the clients the tests connect (Redis over TLS, a
// Sentinel's failover client) are closed with their goroutines.
func TestMain(m *testing.M) { testenv.VerifyNoLeaks(m) }
