//go:build !unix

package gateway

import "errors"

// openFileLimit is not known here: shed.max_conns stands as configured.
func openFileLimit() (int, error) { return 0, errors.New("no RLIMIT_NOFILE on this platform") }
