package providers_test

import (
	"encoding/base64"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
)

// newRedirector starts a server that answers every request with a 302 to
// target.
func newRedirector(t *testing.T, target string) string {
	srv := httptest.NewServer(http.RedirectHandler(target, http.StatusFound))
	t.Cleanup(srv.Close)
	return srv.URL
}

// newReplier starts a server that answers every request with status,
// header and body.
func newReplier(t *testing.T, status int, header http.Header, body string) string {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		for k, vs := range header {
			w.Header()[k] = vs
		}
		w.WriteHeader(status)
		_, _ = w.Write([]byte(body))
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}

// basicAuthValue is the Authorization header value of HTTP basic auth.
func basicAuthValue(user, password string) string {
	return "Basic " + base64.StdEncoding.EncodeToString([]byte(user+":"+password))
}

func itoa(n int) string { return strconv.Itoa(n) }

// newHanger starts a server that never answers: each request is held until
// its client gives up or the test ends.
func newHanger(t *testing.T) string {
	t.Helper()
	done := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) {
		select {
		case <-r.Context().Done():
		case <-done:
		}
	}))
	t.Cleanup(func() {
		close(done)
		srv.Close()
	})
	return srv.URL
}
