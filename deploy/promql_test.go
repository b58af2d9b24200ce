package deploy_test

import (
	"errors"
	"fmt"
	"maps"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/promql/parser"

	"github.com/notifier/notifier/dispatch"
	"github.com/notifier/notifier/gateway"
	"github.com/notifier/notifier/limits/fleet"
	"github.com/notifier/notifier/providers"
)

// targetLabels are the labels Prometheus adds to every scraped series.
var targetLabels = []string{"instance", "job"}

// fleetWide are the gauges every instance reports with the same, shared
// value (read from Redis or the configuration): summing them over instances
// multiplies them by the fleet's size.
var fleetWide = []string{
	"notifier_leaky_queue_depth",
	"notifier_provider_contract",
	"notifier_provider_max_queue_delay_seconds",
	"notifier_provider_paused",
	"notifier_tenant_queued",
}

// exportedSeries is one series name the notifier exports: a counter or
// gauge, or one of a histogram's _bucket, _sum and _count.
type exportedSeries struct {
	family string
	typ    dto.MetricType
	labels set // the label names, without the target labels
}

// exportedMetrics gathers what dispatch.NewMetrics registers, with every
// vector set once so each family appears, keyed by series name.
func exportedMetrics(t *testing.T) map[string]exportedSeries {
	t.Helper()
	reg := prometheus.NewRegistry()
	m := dispatch.NewMetrics(reg)
	m.Jobs.WithLabelValues("sms", "twilio", dispatch.OutcomeSent).Inc()
	m.Deferrals.WithLabelValues(dispatch.LayerLeaky, "full").Inc()
	m.QueueLatency.WithLabelValues("twilio").Observe(0.1)
	m.JobLatency.WithLabelValues("sms", "twilio").Observe(0.1)
	m.QueueDepth.WithLabelValues("twilio").Set(1)
	m.LimitDecisions.WithLabelValues(dispatch.LayerUser, "allow").Inc()
	m.ProviderRequests.WithLabelValues("twilio", "2xx").Inc()
	m.ProviderSeconds.WithLabelValues("twilio").Observe(0.1)
	m.ProviderPaused.WithLabelValues("twilio", fleet.PauseCredentials).Set(0)
	m.InFlight.Set(1)
	m.Contract.WithLabelValues("twilio").Set(100)
	m.MaxQueueDelay.WithLabelValues("twilio").Set(2)
	m.Ready.Set(1)
	m.Replays.WithLabelValues("sms").Inc()
	m.TenantSent.WithLabelValues("twilio", "default").Inc()
	m.TenantQueued.WithLabelValues("sms", "default").Set(1)
	m.CreatedAtIgnored.WithLabelValues("sms").Inc()
	m.Ambiguous.WithLabelValues("twilio").Inc()
	m.Deliveries.WithLabelValues("twilio", "undelivered").Inc()
	m.Failovers.WithLabelValues("twilio", "twilio-b", dispatch.FailoverCircuitOpen).Inc()
	m.EffectiveRate.WithLabelValues("twilio").Set(70)
	m.Suppressions.WithLabelValues("sms").Inc()
	m.Digests.WithLabelValues("sms").Inc()
	m.Probes.WithLabelValues("twilio", "sent").Inc()
	gm := gateway.NewMetrics(reg)
	gm.Requests.WithLabelValues("acme-app", "202").Inc()

	families, err := reg.Gather()
	if err != nil {
		t.Fatalf("gather: %v", err)
	}
	if n := collectorFields(m) + collectorFields(gm); len(families) != n {
		t.Fatalf("dispatch.Metrics and gateway.Metrics have %d collectors but %d families were gathered: "+
			"set the new vector once in exportedMetrics", n, len(families))
	}
	out := make(map[string]exportedSeries)
	for _, f := range families {
		ls := make(set)
		for _, lp := range f.GetMetric()[0].GetLabel() {
			ls[lp.GetName()] = true
		}
		s := exportedSeries{family: f.GetName(), typ: f.GetType(), labels: ls}
		if f.GetType() != dto.MetricType_HISTOGRAM {
			out[f.GetName()] = s
			continue
		}
		out[f.GetName()+"_sum"] = s
		out[f.GetName()+"_count"] = s
		bucket := s
		bucket.labels = ls.with("le")
		out[f.GetName()+"_bucket"] = bucket
	}
	return out
}

// knownValues are the values the notifier gives its enumerated labels; an
// equality or alternation matcher on one of these labels must use them.
func knownValues() map[string]set {
	status := newSet("429") // dispatch counts a 429 apart from other 4xx
	for _, err := range []error{
		nil,
		&providers.Error{Status: 101},
		&providers.Error{Status: 302},
		&providers.Error{Status: 404},
		&providers.Error{Status: 503},
		&providers.Error{}, // no answer
	} {
		status[providers.StatusClass(err)] = true
	}
	return map[string]set{
		"outcome": newSet(dispatch.OutcomeSent, dispatch.OutcomeDuplicate, dispatch.OutcomeSuppressed, dispatch.OutcomeDead),
		// The limit layers, and the backends' names (limits.Set.Name)
		// for a deferral because a backend is unavailable.
		"layer": newSet(dispatch.LayerUser, dispatch.LayerGlobal, dispatch.LayerLeaky,
			dispatch.LayerProvider, dispatch.LayerLedger, "redis", "local"),
		"status":   status,
		"decision": newSet("allow", "deny", dispatch.DecisionShadowDeny),
		// The deferral reasons are literals in dispatch/admit.go, job.go,
		// waits.go, send.go and backend.go (README, Health and metrics);
		// the pause reasons are dispatch's Pause* constants.
		// The gateway's answers (gateway.New counts these codes).
		"code": newSet("200", "202", "400", "401", "403", "408", "409", "413", "415", "429", "503"),
		"reason": newSet("defer", "empty", "switch", "full", "late", "rate_limited", "retry",
			"paused", "circuit_open", "busy", "unavailable", "recipient_throttled", "budget_spent", "quota",
			fleet.PauseRateLimited, fleet.PauseCredentials,
			dispatch.FailoverCircuitOpen, dispatch.FailoverQuota, dispatch.FailoverDeadline),
	}
}

// collectorFields counts the fields of a metrics struct (dispatch.Metrics,
// gateway.Metrics) that are collectors.
func collectorFields(m any) int {
	n := 0
	v := reflect.ValueOf(m).Elem()
	for i := range v.NumField() {
		if _, ok := v.Field(i).Interface().(prometheus.Collector); ok {
			n++
		}
	}
	return n
}

// set is a set of strings.
type set map[string]bool

func newSet(items ...string) set {
	s := make(set, len(items))
	for _, it := range items {
		s[it] = true
	}
	return s
}

func (s set) with(items ...string) set {
	out := maps.Clone(s)
	if out == nil {
		out = make(set)
	}
	for _, it := range items {
		out[it] = true
	}
	return out
}

func (s set) without(items ...string) set {
	out := maps.Clone(s)
	for _, it := range items {
		delete(out, it)
	}
	return out
}

func (s set) intersect(o set) set {
	out := make(set)
	for k := range s {
		if o[k] {
			out[k] = true
		}
	}
	return out
}

func (s set) sorted() []string { return slices.Sorted(maps.Keys(s)) }

// grafanaVar is the stand-in for a Grafana template variable in a
// PromQL expression: a string the label-value checks recognise.
const grafanaVar = "__grafana_var_"

// checker checks PromQL expressions against what the notifier exports.
type checker struct {
	exported map[string]exportedSeries
	values   map[string]set
	parser   parser.Parser
	// multi are the names of multi-value Grafana variables, which only a
	// regular-expression matcher can take.
	multi set
}

func newChecker(t *testing.T) *checker {
	t.Helper()
	return &checker{
		exported: exportedMetrics(t),
		values:   knownValues(),
		parser:   parser.NewParser(parser.Options{}),
		multi:    make(set),
	}
}

// usage is what one expression uses and gives.
type usage struct {
	expr    parser.Expr
	metrics set // the series names it selects
	out     set // the labels every series of its result carries
}

// check parses expr and checks every selector, matcher, grouping and
// function use in it; the error joins every problem found.
func (c *checker) check(expr string) (*usage, error) {
	e, err := c.parser.ParseExpr(expr)
	if err != nil {
		return nil, fmt.Errorf("parse %q: %w", expr, err)
	}
	u := &usage{expr: e, metrics: make(set)}
	var errs []error
	parser.Inspect(e, func(node parser.Node, _ []parser.Node) error {
		switch n := node.(type) {
		case *parser.VectorSelector:
			errs = append(errs, c.checkSelector(n, u)...)
		case *parser.AggregateExpr:
			if n.Op.IsAggregatorWithParam() || n.Without {
				break
			}
			if missing := newSet(n.Grouping...).without(c.available(n.Expr).sorted()...); len(missing) > 0 {
				errs = append(errs, fmt.Errorf("%s by (%s): no series below has %s",
					n.Op, strings.Join(n.Grouping, ", "), strings.Join(missing.sorted(), ", ")))
			}
			if n.Op == parser.SUM {
				for _, name := range fleetWideUnder(n.Expr) {
					errs = append(errs, fmt.Errorf("sum over %s: every instance reports the same "+
						"fleet-wide value, aggregate it with max", name))
				}
			}
		case *parser.BinaryExpr:
			vm := n.VectorMatching
			if vm == nil || (!vm.On && len(vm.MatchingLabels) == 0 && len(vm.Include) == 0) {
				break
			}
			have := c.available(n.LHS).with(c.available(n.RHS).sorted()...)
			want := newSet(vm.MatchingLabels...).with(vm.Include...)
			if missing := want.without(have.sorted()...); len(missing) > 0 {
				errs = append(errs, fmt.Errorf("%s matching on %s: no series on either side has them",
					n.Op, strings.Join(missing.sorted(), ", ")))
			}
		case *parser.Call:
			errs = append(errs, c.checkCall(n)...)
		}
		return nil
	})
	u.out = c.outLabels(e)
	return u, errors.Join(errs...)
}

func (c *checker) checkSelector(vs *parser.VectorSelector, u *usage) []error {
	name := vs.Name
	if name == "" {
		return []error{fmt.Errorf("selector %s: name the metric", vs)}
	}
	s, ok := c.exported[name]
	if !ok {
		return []error{fmt.Errorf("metric %s: the notifier does not export it", name)}
	}
	u.metrics[name] = true
	var errs []error
	for _, m := range vs.LabelMatchers {
		if m.Name == model.MetricNameLabel {
			continue
		}
		if !s.labels[m.Name] && !slices.Contains(targetLabels, m.Name) {
			errs = append(errs, fmt.Errorf("%s{%s}: %s has no label %s", name, m, s.family, m.Name))
			continue
		}
		if v, ok := strings.CutPrefix(m.Value, grafanaVar); ok {
			if c.multi[v] && m.Type != labels.MatchRegexp && m.Type != labels.MatchNotRegexp {
				errs = append(errs, fmt.Errorf("%s{%s}: the multi-value variable $%s needs =~", name, m.Name, v))
			}
			continue
		}
		known, enumerated := c.values[m.Name]
		if !enumerated {
			continue
		}
		for _, v := range matcherValues(m) {
			if !known[v] {
				errs = append(errs, fmt.Errorf("%s{%s}: the notifier never sets %s=%q (it sets %s)",
					name, m, m.Name, v, strings.Join(known.sorted(), ", ")))
			}
		}
	}
	return errs
}

// literalAlternation matches a regular expression that is only literal
// alternatives: 5xx|error.
var literalAlternation = regexp.MustCompile(`^[A-Za-z0-9_]+(\|[A-Za-z0-9_]+)*$`)

// matcherValues is the label values a matcher names, when it names them
// literally (=, !=, or a plain alternation).
func matcherValues(m *labels.Matcher) []string {
	switch m.Type {
	case labels.MatchEqual, labels.MatchNotEqual:
		if m.Value == "" {
			return nil
		}
		return []string{m.Value}
	default:
		if literalAlternation.MatchString(m.Value) {
			return strings.Split(m.Value, "|")
		}
		return nil
	}
}

// counterFuncs take a range of counter samples.
var counterFuncs = newSet("rate", "irate", "increase", "resets")

func (c *checker) checkCall(call *parser.Call) []error {
	var errs []error
	name := call.Func.Name
	if counterFuncs[name] {
		for _, vs := range selectorsUnder(call) {
			s, ok := c.exported[vs.Name]
			if !ok {
				continue
			}
			if s.typ == dto.MetricType_GAUGE {
				errs = append(errs, fmt.Errorf("%s(%s): %s is a gauge", name, vs.Name, s.family))
			}
		}
	}
	if name == "histogram_quantile" {
		if !c.outLabels(call.Args[1])["le"] {
			errs = append(errs, fmt.Errorf("histogram_quantile over %s: keep the le label (sum by (..., le))", call.Args[1]))
		}
		for _, vs := range selectorsUnder(call.Args[1]) {
			if !strings.HasSuffix(vs.Name, "_bucket") {
				errs = append(errs, fmt.Errorf("histogram_quantile over %s: not a _bucket series", vs.Name))
			}
		}
	}
	return errs
}

// selectorsUnder lists the vector selectors in the node's subtree.
func selectorsUnder(node parser.Node) []*parser.VectorSelector {
	var out []*parser.VectorSelector
	parser.Inspect(node, func(n parser.Node, _ []parser.Node) error {
		if vs, ok := n.(*parser.VectorSelector); ok {
			out = append(out, vs)
		}
		return nil
	})
	return out
}

// fleetWideUnder names the fleet-wide gauges selected in node's subtree,
// not counting those a nested aggregation already aggregates.
func fleetWideUnder(node parser.Node) []string {
	switch n := node.(type) {
	case *parser.AggregateExpr:
		return nil
	case *parser.VectorSelector:
		if slices.Contains(fleetWide, n.Name) {
			return []string{n.Name}
		}
		return nil
	}
	var out []string
	for child := range parser.ChildrenIter(node) {
		out = append(out, fleetWideUnder(child)...)
	}
	return out
}

// available is every label some series below node may carry.
func (c *checker) available(node parser.Node) set {
	out := newSet(targetLabels...)
	for _, vs := range selectorsUnder(node) {
		if s, ok := c.exported[vs.Name]; ok {
			out = out.with(s.labels.sorted()...)
		}
	}
	return out
}

// outLabels is the set of labels every series of e's result carries
// (following the evaluation rules of promql/engine.go), without
// __name__; empty for a scalar.
func (c *checker) outLabels(e parser.Expr) set {
	switch n := e.(type) {
	case *parser.ParenExpr:
		return c.outLabels(n.Expr)
	case *parser.UnaryExpr:
		return c.outLabels(n.Expr)
	case *parser.StepInvariantExpr:
		return c.outLabels(n.Expr)
	case *parser.SubqueryExpr:
		return c.outLabels(n.Expr)
	case *parser.MatrixSelector:
		return c.outLabels(n.VectorSelector)
	case *parser.VectorSelector:
		s, ok := c.exported[n.Name]
		if !ok {
			return newSet(targetLabels...)
		}
		return s.labels.with(targetLabels...)
	case *parser.AggregateExpr:
		in := c.outLabels(n.Expr)
		switch {
		case n.Op == parser.TOPK || n.Op == parser.BOTTOMK || n.Op == parser.LIMITK || n.Op == parser.LIMIT_RATIO:
			return in
		case n.Without:
			return in.without(n.Grouping...)
		case n.Op == parser.COUNT_VALUES:
			if s, ok := n.Param.(*parser.StringLiteral); ok {
				return newSet(n.Grouping...).with(s.Val)
			}
			return newSet(n.Grouping...)
		default:
			// A grouping label no input series has is absent from the result.
			return newSet(n.Grouping...).intersect(in)
		}
	case *parser.Call:
		switch n.Func.Name {
		case "histogram_quantile":
			return c.outLabels(n.Args[1]).without("le")
		case "absent", "absent_over_time":
			out := make(set)
			for _, vs := range selectorsUnder(n) {
				for _, m := range vs.LabelMatchers {
					if m.Type == labels.MatchEqual && m.Name != model.MetricNameLabel {
						out[m.Name] = true
					}
				}
			}
			return out
		case "label_replace", "label_join":
			if dst, ok := n.Args[1].(*parser.StringLiteral); ok {
				return c.outLabels(n.Args[0]).with(dst.Val)
			}
		}
		for _, a := range n.Args {
			if a.Type() == parser.ValueTypeVector || a.Type() == parser.ValueTypeMatrix {
				return c.outLabels(a)
			}
		}
		return make(set)
	case *parser.BinaryExpr:
		lt, rt := n.LHS.Type(), n.RHS.Type()
		switch {
		case lt == parser.ValueTypeScalar && rt == parser.ValueTypeScalar:
			return make(set)
		case lt == parser.ValueTypeScalar:
			return c.outLabels(n.RHS)
		case rt == parser.ValueTypeScalar:
			return c.outLabels(n.LHS)
		}
		lhs, rhs := c.outLabels(n.LHS), c.outLabels(n.RHS)
		vm := n.VectorMatching
		switch {
		case n.Op == parser.LAND || n.Op == parser.LUNLESS:
			return lhs
		case n.Op == parser.LOR:
			return lhs.intersect(rhs)
		case vm == nil:
			return lhs
		case vm.Card == parser.CardOneToOne && vm.On:
			return lhs.intersect(newSet(vm.MatchingLabels...))
		case vm.Card == parser.CardOneToOne:
			return lhs.without(vm.MatchingLabels...)
		case vm.Card == parser.CardManyToOne:
			return lhs.with(vm.Include...)
		default: // one-to-many: the result carries the right side's labels
			return rhs.with(vm.Include...)
		}
	default:
		return make(set)
	}
}
