package gateway

import (
	"crypto/rand"
	"encoding/hex"
	"strings"

	"go.opentelemetry.io/otel/trace"

	"github.com/notifier/notifier/queue"
)

// tracerOf is tp's tracer for the gateway, nil without a provider.
func tracerOf(tp trace.TracerProvider) trace.Tracer {
	if tp == nil {
		return nil
	}
	return tp.Tracer("github.com/notifier/notifier/gateway")
}

// Trace context headers (W3C Trace Context), as stored on a job's NATS
// message: the names the dispatcher reads (queue.HeaderTraceparent).
const (
	HeaderTraceparent = queue.HeaderTraceparent
	HeaderTracestate  = queue.HeaderTracestate
	maxTracestate     = 512
)

// validTraceparent reports whether v is a W3C traceparent this gateway can
// pass on: version 00 exactly "00-<32 hex>-<16 hex>-<2 hex>", a later
// version (not ff) at least that with more fields after a '-'; lower-case
// hex; the trace id and parent id not all zeros.
func validTraceparent(v string) bool {
	if len(v) < 55 {
		return false
	}
	ver := v[:2]
	if !isHex(ver) || ver == "ff" || (ver == "00" && len(v) != 55) || (len(v) > 55 && v[55] != '-') {
		return false
	}
	if v[2] != '-' || v[35] != '-' || v[52] != '-' {
		return false
	}
	trace, parent, flags := v[3:35], v[36:52], v[53:55]
	return isHex(trace) && isHex(parent) && isHex(flags) &&
		trace != strings.Repeat("0", 32) && parent != strings.Repeat("0", 16)
}

// newTraceparent starts a trace: a random trace id and parent id, sampled.
func newTraceparent() string {
	var b [24]byte
	for {
		_, _ = rand.Read(b[:]) // crypto/rand.Read never fails (Go 1.24+)
		tp := "00-" + hex.EncodeToString(b[:16]) + "-" + hex.EncodeToString(b[16:]) + "-01"
		if validTraceparent(tp) { // all zeros: draw again
			return tp
		}
	}
}

// newID is a generated job id: a random (version 4) UUID.
func newID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	h := hex.EncodeToString(b[:])
	return h[:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:]
}
