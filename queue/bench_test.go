package queue_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/notifier/notifier/queue"
)

var benchJob = []byte(`{"id":"otp-42","user_id":"u-7","channel":"sms","to":"+14155550123","body":"Your code is 123456",` +
	`"title":"Code","data":{"campaign":"signup"},"expires_at":"2030-01-02T03:04:05Z","created_at":"2030-01-02T03:00:00Z"}`)

func BenchmarkDecode(b *testing.B) {
	b.SetBytes(int64(len(benchJob)))
	for b.Loop() {
		if _, err := queue.Decode("notify.jobs.sms", benchJob); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkDecodeMaxBody(b *testing.B) {
	data := []byte(`{"id":"big","user_id":"u","channel":"email","to":"a@example.com","body":"` + strings.Repeat("x", queue.MaxBodyBytes) + `"}`)
	b.SetBytes(int64(len(data)))
	for b.Loop() {
		if _, err := queue.Decode("notify.jobs.email", data); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkMarshal(b *testing.B) {
	j, err := queue.Decode("notify.jobs.sms", benchJob)
	if err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		if _, err := j.Marshal(); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkPublishFetchAck times the consuming side of one job's trip
// through an embedded JetStream (file store with SyncAlways): its share of a
// Fetch of up to 32 and one double ack, done one after another. The
// publishing (batched, before the timer) is not timed.
func BenchmarkPublishFetchAck(b *testing.B) {
	bb := setupB(b)
	c := bb.consumerB(b)
	batch := bb.pub.NewBatch(256, 0)
	for i := range b.N {
		if err := batch.Publish(b.Context(), job("sms", fmt.Sprintf("b-%d", i)), i%10 == 0); err != nil {
			b.Fatal(err)
		}
	}
	if _, err := batch.Wait(b.Context()); err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for got := 0; got < b.N; {
		ds, err := c.Fetch(b.Context(), 32, time.Second)
		if err != nil {
			b.Fatal(err)
		}
		for _, d := range ds {
			if err := d.Ack(b.Context()); err != nil {
				b.Fatal(err)
			}
		}
		got += len(ds)
	}
}
