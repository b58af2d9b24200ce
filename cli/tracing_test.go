package cli

import (
	"context"
	"encoding/hex"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	collectortrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/protobuf/proto"

	"github.com/notifier/notifier/queue"
	"github.com/notifier/notifier/testenv"
)

// collector is a fake OTLP/HTTP collector: it keeps the spans it is sent.
type collector struct {
	mu    sync.Mutex
	spans map[string][]string // span name → trace ids (hex)
	srv   *httptest.Server
}

func newCollector(t *testing.T) *collector {
	c := &collector{spans: map[string][]string{}}
	c.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		var req collectortrace.ExportTraceServiceRequest
		if r.URL.Path != "/v1/traces" || proto.Unmarshal(body, &req) != nil {
			http.Error(w, "bad export", http.StatusBadRequest)
			return
		}
		c.mu.Lock()
		for _, rs := range req.ResourceSpans {
			for _, ss := range rs.ScopeSpans {
				for _, s := range ss.Spans {
					c.spans[s.Name] = append(c.spans[s.Name], hex.EncodeToString(s.TraceId))
				}
			}
		}
		c.mu.Unlock()
		w.Header().Set("Content-Type", "application/x-protobuf")
		_, _ = w.Write(nil)
	}))
	t.Cleanup(c.srv.Close)
	return c
}

func (c *collector) traces(name string) []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]string(nil), c.spans[name]...)
}

// TestRunExportsSpansOverOTLP: with tracing.otlp_endpoint set, `notifier
// run` continues the trace of a job published with a traceparent and
// exports its spans over OTLP/HTTP (the last ones at a stop); the webhook
// provider receives the trace.
func TestRunExportsSpansOverOTLP(t *testing.T) {
	t.Parallel()
	col := newCollector(t)
	w := newWorld(t, 100, "tracing:\n  otlp_endpoint: "+col.srv.URL+"/v1/traces\n")
	p := w.run()
	const traceID = "0af7651916cd43dd8448eb211c80319c"
	data, err := (&queue.Job{ID: "traced", UserID: "u1", Channel: "sms", To: "+15550100", Body: "hi"}).Marshal()
	if err != nil {
		t.Fatal(err)
	}
	nc := w.nats.Conn()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	m := &nats.Msg{Subject: queue.JobSubjectFor("sms", "", false), Data: data, Header: nats.Header{}}
	m.Header.Set(queue.HeaderTraceparent, "00-"+traceID+"-b7ad6b7169203331-01")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	testenv.WaitFor(t, 20*time.Second, "the job published", func() bool {
		_, err := js.PublishMsg(ctx, m, jetstream.WithMsgID("traced"))
		return err == nil
	})
	testenv.WaitFor(t, 30*time.Second, "the job sent", func() bool { return len(w.fake.AcceptedIDs()) == 1 })
	if got := w.fake.Accepted()[0].Header.Get("traceparent"); !strings.HasPrefix(got, "00-"+traceID+"-") {
		t.Fatalf("traceparent at the provider %q, want one of trace %s", got, traceID)
	}
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	<-p.done
	for _, name := range []string{"notifier.job", "notifier.send"} {
		if got := col.traces(name); len(got) != 1 || got[0] != traceID {
			t.Errorf("spans %s exported in traces %v, want one in %s", name, got, traceID)
		}
	}
}
