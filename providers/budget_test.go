package providers_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/notifier/notifier/providers"
	"github.com/notifier/notifier/queue"
)

func TestParseBudget(t *testing.T) {
	t.Parallel()
	now := time.Unix(1_700_000_000, 0)
	for _, tc := range []struct {
		name    string
		headers map[string]string
		want    providers.Budget
		ok      bool
		spent   bool
	}{
		{"none", nil, providers.Budget{}, false, false},
		{"x-ratelimit delta", map[string]string{"X-RateLimit-Remaining": "0", "X-RateLimit-Reset": "2"}, providers.Budget{Remaining: 0, Reset: 2 * time.Second}, true, true},
		{"x-ratelimit unix time (SendGrid)", map[string]string{"X-RateLimit-Remaining": "0", "X-RateLimit-Reset": "1700000003"}, providers.Budget{Remaining: 0, Reset: 3 * time.Second}, true, true},
		{"x-ratelimit left", map[string]string{"X-RateLimit-Remaining": "41", "X-RateLimit-Reset": "1"}, providers.Budget{Remaining: 41, Reset: time.Second}, true, false},
		{"draft fields", map[string]string{"RateLimit-Remaining": "0", "RateLimit-Reset": "5"}, providers.Budget{Remaining: 0, Reset: 5 * time.Second}, true, true},
		{"structured field", map[string]string{"RateLimit": `"default";r=0;t=2`}, providers.Budget{Remaining: 0, Reset: 2 * time.Second}, true, true},
		{"structured, the tightest policy", map[string]string{"RateLimit": `"burst";r=40;t=1, "day";r=0;t=3600`}, providers.Budget{Remaining: 0, Reset: time.Hour}, true, true},
		{"structured wins", map[string]string{"RateLimit": `"k";r=7;t=1`, "X-RateLimit-Remaining": "0", "X-RateLimit-Reset": "9"}, providers.Budget{Remaining: 7, Reset: time.Second}, true, false},
		{"absurd reset capped", map[string]string{"X-RateLimit-Remaining": "0", "X-RateLimit-Reset": "99999"}, providers.Budget{Remaining: 0, Reset: providers.MaxRetryAfter}, true, true},
		// Past what a Duration (or a time in ns) holds: capped too, not
		// read as 0 (a float converted to int64 out of range: on amd64
		// the least int64, on arm64 the greatest).
		{"absurd unix reset capped", map[string]string{"X-RateLimit-Remaining": "0", "X-RateLimit-Reset": "99999999999"}, providers.Budget{Remaining: 0, Reset: providers.MaxRetryAfter}, true, true},
		{"absurd delta reset capped", map[string]string{"RateLimit-Remaining": "0", "RateLimit-Reset": "99999999999"}, providers.Budget{Remaining: 0, Reset: providers.MaxRetryAfter}, true, true},
		{"reset in the past", map[string]string{"X-RateLimit-Remaining": "0", "X-RateLimit-Reset": "1600000000"}, providers.Budget{Remaining: 0}, true, false},
		{"unreadable", map[string]string{"X-RateLimit-Remaining": "lots"}, providers.Budget{}, false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := http.Header{}
			for k, v := range tc.headers {
				h.Set(k, v)
			}
			got, ok := providers.ParseBudget(h, now)
			if ok != tc.ok || got != tc.want || got.Spent() != tc.spent {
				t.Fatalf("ParseBudget(%v) = %+v, %v (spent %v); want %+v, %v (spent %v)", tc.headers, got, ok, got.Spent(), tc.want, tc.ok, tc.spent)
			}
		})
	}
}

// TestWebhookReportsBudget: the webhook reports the rate-limit headers of
// its answers to the context's listener, on a 2xx as on a 429.
func TestWebhookReportsBudget(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-RateLimit-Remaining", "0")
		w.Header().Set("X-RateLimit-Reset", "2")
		w.WriteHeader(http.StatusAccepted)
	}))
	defer srv.Close()
	reg, err := providers.NewRegistry([]providers.Config{{Name: "w", Channel: "sms", Default: true, Kind: "webhook", URL: srv.URL, Rate: 10}}, providers.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer reg.Close()
	p, _, _ := reg.Get("w")
	var got []providers.Budget
	ctx := providers.WithBudgetReport(context.Background(), func(b providers.Budget) { got = append(got, b) })
	if err := p.Send(ctx, &providers.Message{Job: queue.Job{ID: "j1", UserID: "u", Channel: "sms", To: "+15550100", Body: "hi"}}); err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || !got[0].Spent() || got[0].Reset != 2*time.Second {
		t.Fatalf("budgets reported %+v, want one spent for 2s", got)
	}
}

// FuzzParseBudget: no header value makes the parser panic, and a budget
// it reads never has a negative or over-long reset.
func FuzzParseBudget(f *testing.F) {
	for _, s := range []string{`"default";r=0;t=2`, `"a";r=1;t=1, "b";r=0;t=60`, `r=;t=`, `"x";r=-1`, "0", "1700000003", "1e308", "NaN"} {
		f.Add(s, s)
	}
	f.Fuzz(func(t *testing.T, structured, plain string) {
		h := http.Header{}
		h.Set("RateLimit", structured)
		h.Set("X-RateLimit-Remaining", plain)
		h.Set("X-RateLimit-Reset", plain)
		b, ok := providers.ParseBudget(h, time.Unix(1_700_000_000, 0))
		if ok && (b.Reset < 0 || b.Reset > providers.MaxRetryAfter) {
			t.Fatalf("reset %s out of [0, %s]", b.Reset, providers.MaxRetryAfter)
		}
	})
}

// BenchmarkParseBudget is the read of every 2xx answer's headers when the
// dispatcher listens for budgets: an answer without rate-limit headers,
// the usual case.
func BenchmarkParseBudget(b *testing.B) {
	h := http.Header{"Content-Type": {"application/json"}, "Date": {"Mon, 07 Dec 2026 12:00:00 GMT"}, "Content-Length": {"2"}}
	now := time.Now()
	for b.Loop() {
		if _, ok := providers.ParseBudget(h, now); ok {
			b.Fatal("a budget from no rate-limit header")
		}
	}
}
