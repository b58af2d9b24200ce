package providers_test

import (
	"net/http"
	"net/http/httptest"
	"testing"
)

// newRedirector starts a server that answers every request with a 302 to
// target.
func newRedirector(t *testing.T, target string) string {
	srv := httptest.NewServer(http.RedirectHandler(target, http.StatusFound))
	t.Cleanup(srv.Close)
	return srv.URL
}
