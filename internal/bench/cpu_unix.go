//go:build unix

package bench

import (
	"os"
	"syscall"
	"time"
)

// processCPU is the CPU time this process has used so far, user plus
// system, from getrusage(RUSAGE_SELF).
func processCPU() (time.Duration, bool) {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0, false
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()), true
}

// childCPU is the CPU time an exited child used, user plus system (0 when
// unknown).
func childCPU(ps *os.ProcessState) time.Duration {
	if ps == nil {
		return 0
	}
	if u, ok := ps.SysUsage().(*syscall.Rusage); ok && u != nil {
		return time.Duration(u.Utime.Nano() + u.Stime.Nano())
	}
	return 0
}
