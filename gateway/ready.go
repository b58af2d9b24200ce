package gateway

import (
	"context"
	"fmt"
	"net/http"
	"time"

	"github.com/valyala/fasthttp"
)

// readyz is GET /readyz: 503 while NATS is not connected or Redis does
// not answer (Deps.Ready), JetStream does not answer within a second
// (Deps.StreamDepth) or acknowledges the publishes slower than
// shed.max_publish_latency.
func (g *Gateway) readyz(c *fasthttp.RequestCtx) {
	c.SetContentType("text/plain; charset=utf-8")
	why := g.probe()
	if why == "" {
		if l := g.acks.latency(); l > g.cfg.Shed.MaxPublishLatency {
			why = fmt.Sprintf("jetstream: publishes wait %s for their acknowledgement, more than gateway.shed.max_publish_latency %s",
				l.Round(time.Millisecond), g.cfg.Shed.MaxPublishLatency)
		}
	}
	if why != "" {
		c.SetStatusCode(http.StatusServiceUnavailable)
		c.SetBodyString("not ready: " + why + "\n")
		return
	}
	c.SetBodyString("ready\n")
}

// probeEvery is how long a probe of the dependencies answers /readyz: a
// flood of /readyz asks Redis and JetStream at most twice a second.
const probeEvery = 500 * time.Millisecond

// probe asks the dependencies whether they are ready (Deps.Ready, then
// Deps.StreamDepth within a second), at most once per probeEvery: the
// requests meanwhile get the last answer ("" ready, else why not).
func (g *Gateway) probe() string {
	g.probeMu.Lock()
	defer g.probeMu.Unlock()
	if !g.probeAt.IsZero() && time.Since(g.probeAt) < probeEvery {
		return g.probeWhy
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	why := ""
	if g.ready != nil {
		if err := g.ready(ctx); err != nil {
			why = err.Error()
		}
	}
	if why == "" && g.streamDepth != nil {
		dctx, cancel := context.WithTimeout(ctx, time.Second)
		defer cancel()
		if _, err := g.streamDepth(dctx); err != nil {
			why = "jetstream: " + err.Error()
		}
	}
	g.probeAt, g.probeWhy = time.Now(), why
	return why
}
