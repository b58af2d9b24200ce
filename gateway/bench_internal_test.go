package gateway_test

import (
	"net/http"
	"testing"

	"github.com/valyala/fasthttp"

	"github.com/notifier/notifier/gateway"
)

// BenchmarkLimitedPath is the handler's own cost of a 429 (no network):
// the key, the bound of the bucket, the answer.
func BenchmarkLimitedPath(b *testing.B) {
	bb := setupB(b, gateway.Config{Keys: keys(1e-6, 1)})
	body := []byte(smsJob(""))
	var c fasthttp.RequestCtx
	do := func() int {
		c.Request.Reset()
		c.Response.Reset()
		c.Request.Header.SetMethod(http.MethodPost)
		c.Request.SetRequestURI("/v1/notifications")
		c.Request.Header.SetContentType("application/json")
		c.Request.Header.Set("Authorization", "Bearer "+acmeKey)
		c.Request.SetBody(body)
		bb.Handle(&c)
		return c.Response.StatusCode()
	}
	do()
	if code := do(); code != http.StatusTooManyRequests {
		b.Fatalf("answer %d", code)
	}
	b.ReportAllocs()
	for b.Loop() {
		do()
	}
}
