package gateway

import (
	"errors"
	"io"
	"runtime"
	"strings"
	"testing"

	"github.com/valyala/fasthttp"
)

// TestADeclaredLengthIsNotAllocatedUpFront: a request declaring 4 MiB
// whose body ends after a few bytes costs readBody its first chunk, not
// the declared 4 MiB (1,024 such requests held 4 GiB before a byte came);
// a body that does arrive whole is read whole, however it is cut.
func TestADeclaredLengthIsNotAllocatedUpFront(t *testing.T) {
	allocated := func(declared int, body string) uint64 {
		var c fasthttp.RequestCtx
		c.Request.SetBodyStream(strings.NewReader(body), declared)
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		_, err := readBody(&c)
		runtime.ReadMemStats(&after)
		if !errors.Is(err, io.ErrUnexpectedEOF) {
			t.Fatalf("a body shorter than declared: %v, want %v", err, io.ErrUnexpectedEOF)
		}
		return after.TotalAlloc - before.TotalAlloc
	}
	least := uint64(1 << 62)
	for range 3 { // the least of three: another goroutine may allocate meanwhile
		least = min(least, allocated(MaxRequestBytes, `{"user_id":"u1"`))
	}
	if least > 2*(64<<10) {
		t.Errorf("a declared %d bytes with %d sent allocated %d bytes, want at most %d", MaxRequestBytes, len(`{"user_id":"u1"`), least, 2*(64<<10))
	}
	t.Logf("declared %d bytes, 15 sent: %d bytes allocated", MaxRequestBytes, least)

	for _, n := range []int{1, 65535, 65536, 65537, 3*65536 + 7, MaxRequestBytes} {
		want := strings.Repeat("x", n)
		var c fasthttp.RequestCtx
		c.Request.SetBodyStream(io.MultiReader(strings.NewReader(want[:n/3]), strings.NewReader(want[n/3:])), n)
		got, err := readBody(&c)
		if err != nil || string(got) != want {
			t.Errorf("a body of %d bytes: %d read (%v)", n, len(got), err)
		}
	}
}
