//go:build unix

package queue_test

import (
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/notifier/notifier/testenv"
)

// BenchmarkInboxSubscribeUnsubscribe is what a fetch no longer pays per
// lane since it keeps its inbox (docs/benchmarks.md, "A fetch keeps its
// inbox"): a fresh inbox subscribed and unsubscribed, as a fetch did for
// each lane it pulled from. cpu-µs/op is this process's CPU (getrusage,
// user and system), client and embedded server together.
func BenchmarkInboxSubscribeUnsubscribe(b *testing.B) {
	nc := testenv.NATS(b).Conn()
	ch := make(chan *nats.Msg, 64)
	before := rusageCPU(b)
	b.ResetTimer()
	for i := range b.N {
		s, err := nc.ChanSubscribe(nc.NewInbox(), ch)
		if err != nil {
			b.Fatal(err)
		}
		if err := s.Unsubscribe(); err != nil {
			b.Fatal(err)
		}
		if i%16 == 15 {
			if err := nc.Flush(); err != nil {
				b.Fatal(err)
			}
		}
	}
	if err := nc.Flush(); err != nil {
		b.Fatal(err)
	}
	b.StopTimer()
	b.ReportMetric(float64((rusageCPU(b)-before).Nanoseconds())/float64(b.N)/1e3, "cpu-µs/op")
}

func rusageCPU(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
