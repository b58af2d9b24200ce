//go:build unix

package gateway

import "syscall"

// openFileLimit is RLIMIT_NOFILE's soft limit (which Go raises to the
// hard one at start).
func openFileLimit() (int, error) {
	var r syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &r); err != nil {
		return 0, err
	}
	if r.Cur > 1<<30 {
		return 1 << 30, nil
	}
	return int(r.Cur), nil
}
