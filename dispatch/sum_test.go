package dispatch

import (
	"hash/fnv"
	"strconv"
	"testing"

	"github.com/notifier/notifier/queue"
)

// TestContentSumIsFNV1a: the sent record's digest of a message is hash/fnv's
// 64-bit FNV-1a in hex, as records written before it was computed inline
// hold: a redelivered copy of an old message is still told apart.
func TestContentSumIsFNV1a(t *testing.T) {
	t.Parallel()
	for _, data := range []string{"", "a", `{"id":"j1","channel":"sms","user_id":"u","body":"hi"}`, string(make([]byte, 4096))} {
		h := fnv.New64a()
		h.Write([]byte(data))
		want := strconv.FormatUint(h.Sum64(), 16)
		jb := &job{dl: &queue.Delivery{Data: []byte(data)}}
		if got := jb.contentSum(); got != want {
			t.Errorf("contentSum(%q…) = %s, want %s", data[:min(len(data), 10)], got, want)
		}
	}
}
