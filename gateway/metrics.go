package gateway

import (
	"strconv"

	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are the gateway's Prometheus metrics (SPEC §9).
type Metrics struct {
	// Requests counts the answers of POST /v1/notifications by key (a
	// configured key name, or "unauthenticated" without a valid key) and
	// code (the HTTP status). Bounded: the configured keys × the codes.
	Requests *prometheus.CounterVec
}

// NewMetrics makes the metrics and registers them with reg (none when nil).
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{Requests: prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "notifier_gateway_requests_total",
		Help: "Requests to POST /v1/notifications by API key name (\"unauthenticated\" without a valid key) and HTTP status code.",
	}, []string{"key", "code"})}
	if reg != nil {
		reg.MustRegister(m.Requests)
	}
	return m
}

// counted are the status codes whose counters are made up front, per key.
var counted = []int{200, 202, 400, 401, 403, 408, 409, 413, 415, 429, 503}

// count adds one to notifier_gateway_requests_total{key=label,code=status}.
func (g *Gateway) count(label string, status int) {
	if c, ok := g.counters[label][status]; ok {
		c.Inc()
		return
	}
	g.requests.WithLabelValues(label, strconv.Itoa(status)).Inc()
}
