package gateway_test

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/notifier/notifier/gateway"
)

// BenchmarkLimitedPath is the handler's own cost of a 429 (no network):
// the key, the bound of the bucket, the answer.
func BenchmarkLimitedPath(b *testing.B) {
	bb := setupB(b, gateway.Config{Keys: keys(1e-6, 1)})
	body := smsJob("")
	do := func() int {
		req := httptest.NewRequest(http.MethodPost, "/v1/notifications", strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Authorization", "Bearer "+acmeKey)
		rec := httptest.NewRecorder()
		bb.ServeHTTP(rec, req)
		return rec.Code
	}
	do()
	if c := do(); c != http.StatusTooManyRequests {
		b.Fatalf("answer %d", c)
	}
	b.ReportAllocs()
	for b.Loop() {
		do()
	}
}
