package providers

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"time"
)

// Limits on what is read from a provider's response.
const (
	// reasonLimit is how much of an error response is read to find the
	// provider's reason.
	reasonLimit = 4 << 10
	// drainLimit is how much of a response is read and discarded so its
	// connection can be reused; past it the connection is closed instead.
	drainLimit = 64 << 10
	// headerLimit bounds a response's header block (HTTP/1.1, and HTTP/2's
	// header list), which net/http otherwise reads whole up to 10 MiB: a
	// provider's answers carry a few KiB, and a larger block (a hostile or
	// broken server) fails the request instead of being buffered whole by
	// each worker.
	headerLimit = 64 << 10
)

// newTransport returns the transport one provider uses for all its requests:
// keep-alive, HTTP/2 when the server offers it, a pool sized for a worker
// pool of a few dozen, and bounded connection set-up. The per-request
// timeout comes from the request context. tlsConfig may be nil (the system
// roots).
func newTransport(tlsConfig *tls.Config) *http.Transport {
	dialer := &net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}
	return &http.Transport{
		Proxy:                  http.ProxyFromEnvironment,
		DialContext:            dialer.DialContext,
		TLSClientConfig:        tlsConfig,
		ForceAttemptHTTP2:      true,
		MaxIdleConns:           128,
		MaxIdleConnsPerHost:    64,
		IdleConnTimeout:        90 * time.Second,
		TLSHandshakeTimeout:    5 * time.Second,
		ExpectContinueTimeout:  time.Second,
		MaxResponseHeaderBytes: headerLimit,
	}
}

// clientTLS is the TLS configuration of a provider's connections: nil (Go's
// defaults, the system roots) without tls_ca_file, else a configuration
// whose only roots are the certificates of that PEM file. Verification is
// never turned off.
func clientTLS(caFile string) (*tls.Config, error) {
	if caFile == "" {
		return nil, nil
	}
	pem, err := os.ReadFile(caFile)
	if err != nil {
		return nil, fmt.Errorf("tls_ca_file: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("tls_ca_file: %q holds no PEM certificate", caFile)
	}
	return &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}, nil
}

// newClient wraps a transport in a client that does not follow redirects:
// following one would turn a POST into a GET (301-303) or send the message
// somewhere it was not configured to go. A 3xx is returned to the caller.
func newClient(rt http.RoundTripper) *http.Client {
	return &http.Client{
		Transport:     rt,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
}

// readReason reads the start of an error response's body for its reason,
// then drains and closes the body.
func readReason(body io.ReadCloser) []byte {
	b, _ := io.ReadAll(io.LimitReader(body, reasonLimit))
	drainClose(body)
	return b
}

// drainClose reads at most drainLimit bytes of body, so a short body's
// connection returns to the pool, and closes it.
func drainClose(body io.ReadCloser) {
	_, _ = io.Copy(io.Discard, io.LimitReader(body, drainLimit))
	_ = body.Close()
}
