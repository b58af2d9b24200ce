package queue

import (
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"pgregory.net/rapid"
)

// TestAckMetadataReadsAsNatsDoes checks the delivery's own reading of the
// $JS.ACK reply subject against nats.Msg.Metadata on random subjects: both
// forms, too few and too many tokens, other prefixes, tokens that are no
// numbers.
func TestAckMetadataReadsAsNatsDoes(t *testing.T) {
	t.Parallel()
	for _, reply := range []string{
		"$JS.ACK.JOBS.lane-1.1.42.7.1796608073123456789.0",
		"$JS.ACK._.ACCHASH.JOBS.lane-1.3.18446744073709551615.9.1796608073123456789.12.rnd",
		"$JS.ACK.hub.ACCHASH.JOBS.lane-1.2.5.9.1.0",
		"$JS.ACK.JOBS.lane.1.2.3",
		"$JS.NAK.JOBS.lane-1.1.42.7.1796608073123456789.0",
		"",
	} {
		compareAckMetadata(t, reply)
	}
	tokens := []string{"$JS", "ACK", "JOBS", "_", "", "0", "1", "42", "18446744073709551615", "99999999999999999999", "1796608073123456789", "x1", "-1"}
	rapid.Check(t, func(t *rapid.T) {
		var parts []string
		if rapid.Bool().Draw(t, "prefix") {
			parts = append(parts, "$JS", "ACK")
		}
		n := rapid.IntRange(0, 14).Draw(t, "tokens")
		for i := range n {
			parts = append(parts, rapid.SampledFrom(tokens).Draw(t, "token"+string(rune('a'+i))))
		}
		compareAckMetadata(t, strings.Join(parts, "."))
	})
}

func compareAckMetadata(t interface {
	Helper()
	Errorf(string, ...any)
}, reply string) {
	t.Helper()
	md, err := (&nats.Msg{Reply: reply, Sub: &nats.Subscription{}}).Metadata()
	stream, seq, delivered, published, ok := ackMetadata(reply)
	if ok != (err == nil) {
		t.Errorf("%q: ackMetadata ok %v, nats.Msg.Metadata error %v", reply, ok, err)
		return
	}
	if !ok {
		return
	}
	if stream != md.Stream || seq != md.Sequence.Stream || delivered != md.NumDelivered || !published.Equal(md.Timestamp) {
		t.Errorf("%q: ackMetadata %q %d %d %s; nats.Msg.Metadata %q %d %d %s", reply,
			stream, seq, delivered, published.Format(time.RFC3339Nano), md.Stream, md.Sequence.Stream, md.NumDelivered, md.Timestamp.Format(time.RFC3339Nano))
	}
}
