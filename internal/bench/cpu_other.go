//go:build !unix

package bench

import (
	"os"
	"time"
)

// processCPU is not measured on this platform.
func processCPU() (time.Duration, bool) { return 0, false }

// childCPU is not measured on this platform.
func childCPU(*os.ProcessState) time.Duration { return 0 }
