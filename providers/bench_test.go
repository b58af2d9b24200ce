package providers_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/notifier/notifier/providers"
)

func BenchmarkSegments(b *testing.B) {
	for name, body := range map[string]string{
		"gsm-160":  strings.Repeat("a", 160),
		"gsm-459":  strings.Repeat("Hello [world] ", 33),
		"ucs2-140": strings.Repeat("Привет 👋 ", 14),
	} {
		b.Run(name, func(b *testing.B) {
			for b.Loop() {
				providers.Segments(body)
			}
		})
	}
}

func BenchmarkMask(b *testing.B) {
	for b.Loop() {
		providers.Mask("sms", "+447911123456")
	}
}

// BenchmarkWebhookSend measures one provider sending in parallel to a local
// server over its pooled keep-alive connections.
func BenchmarkWebhookSend(b *testing.B) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusOK)
	}))
	defer srv.Close()
	w, err := providers.NewWebhook(providers.Config{Name: "bench", Channel: "sms", Kind: "webhook", URL: srv.URL, Rate: 1},
		providers.Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer w.Close()
	b.RunParallel(func(pb *testing.PB) {
		m := smsMessage()
		for pb.Next() {
			if err := w.Send(context.Background(), m); err != nil {
				b.Error(err)
				return
			}
		}
	})
}
