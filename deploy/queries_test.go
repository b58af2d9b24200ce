package deploy_test

import (
	"fmt"
	"maps"
	"slices"
	"testing"
)

// queryCase evaluates dashboard queries (as the dashboard has them, with
// every provider selected) on synthetic series, through promtool's
// promql_expr_test: the panels show what their titles say.
type queryCase struct {
	name   string
	series map[string]string // promtool's expanding notation, one sample a minute
	at     string            // eval_time
	checks []queryCheck
}

type queryCheck struct {
	panel, ref string             // the dashboard target: panel title and refId
	want       map[string]float64 // result series ('{provider="twilio"}') → value
}

var queryCases = []queryCase{
	{
		name: "sent rate against contract",
		series: map[string]string{
			`notifier_jobs_total{instance="a",channel="sms",provider="twilio",outcome="sent"}`: `0+60x20`,
			`notifier_jobs_total{instance="b",channel="sms",provider="twilio",outcome="sent"}`: `0+120x20`,
			`notifier_jobs_total{instance="a",channel="sms",provider="twilio",outcome="dead"}`: `0+60x20`,
			`notifier_jobs_total{instance="a",channel="push",provider="fcm",outcome="sent"}`:   `0+30x20`,
			`notifier_provider_contract{instance="a",provider="twilio"}`:                       `100x20`,
			`notifier_provider_contract{instance="b",provider="twilio"}`:                       `100x20`,
			`notifier_provider_contract{instance="a",provider="fcm"}`:                          `250x20`,
			`notifier_provider_contract{instance="b",provider="fcm"}`:                          `250x20`,
		},
		at: "10m",
		checks: []queryCheck{
			// Sends summed over the fleet, dead letters not counted.
			{"Sent rate against contract", "A", map[string]float64{`{provider="twilio"}`: 3, `{provider="fcm"}`: 0.5}},
			// The contract once, not once per instance.
			{"Sent rate against contract", "B", map[string]float64{`{provider="twilio"}`: 100, `{provider="fcm"}`: 250}},
			{"Outcomes by channel and outcome", "A", map[string]float64{
				`{channel="sms",outcome="sent"}`: 3, `{channel="sms",outcome="dead"}`: 1, `{channel="push",outcome="sent"}`: 0.5,
			}},
		},
	},
	{
		name: "queue latency and depth",
		series: map[string]string{
			`notifier_queue_latency_seconds_bucket{instance="a",provider="twilio",le="1"}`:    `0x20`,
			`notifier_queue_latency_seconds_bucket{instance="a",provider="twilio",le="2"}`:    `0+60x20`,
			`notifier_queue_latency_seconds_bucket{instance="a",provider="twilio",le="+Inf"}`: `0+60x20`,
			`notifier_queue_latency_seconds_bucket{instance="b",provider="twilio",le="1"}`:    `0x20`,
			`notifier_queue_latency_seconds_bucket{instance="b",provider="twilio",le="2"}`:    `0+60x20`,
			`notifier_queue_latency_seconds_bucket{instance="b",provider="twilio",le="+Inf"}`: `0+60x20`,
			`notifier_provider_max_queue_delay_seconds{instance="a",provider="twilio"}`:       `2x20`,
			`notifier_provider_max_queue_delay_seconds{instance="b",provider="twilio"}`:       `2x20`,
			`notifier_provider_contract{instance="a",provider="twilio"}`:                      `100x20`,
			`notifier_provider_contract{instance="b",provider="twilio"}`:                      `100x20`,
			`notifier_leaky_queue_depth{instance="a",provider="twilio"}`:                      `40x20`,
			`notifier_leaky_queue_depth{instance="b",provider="twilio"}`:                      `40x20`,
		},
		at: "10m",
		checks: []queryCheck{
			{"Queue latency p50 / p99 against max_queue_delay", "A", map[string]float64{`{provider="twilio"}`: 1.5}},
			{"Queue latency p50 / p99 against max_queue_delay", "B", map[string]float64{`{provider="twilio"}`: 1.99}},
			{"Queue latency p50 / p99 against max_queue_delay", "C", map[string]float64{`{provider="twilio"}`: 2}},
			// The fleet-wide depth once, and the capacity rate × max_queue_delay.
			{"Leaky queue depth", "A", map[string]float64{`{provider="twilio"}`: 40}},
			{"Leaky queue depth", "B", map[string]float64{`{provider="twilio"}`: 200}},
		},
	},
	{
		name: "limits and provider calls",
		series: map[string]string{
			`notifier_limit_decisions_total{instance="a",layer="user",decision="allow"}`:         `0+180x20`,
			`notifier_limit_decisions_total{instance="a",layer="user",decision="deny"}`:          `0+60x20`,
			`notifier_limit_decisions_total{instance="a",layer="global",decision="allow"}`:       `0+240x20`,
			`notifier_limit_decisions_total{instance="a",layer="global",decision="shadow_deny"}`: `0+24x20`,
			`notifier_limit_decisions_total{instance="a",layer="leaky",decision="allow"}`:        `0+60x20`,
			`notifier_limit_decisions_total{instance="a",layer="leaky",decision="deny"}`:         `0x20`,
			`notifier_provider_request_seconds_sum{instance="a",provider="twilio"}`:              `0+30x20`,
			`notifier_provider_request_seconds_count{instance="a",provider="twilio"}`:            `0+60x20`,
			`notifier_provider_requests_total{instance="a",provider="twilio",status="2xx"}`:      `0+60x20`,
			`notifier_provider_requests_total{instance="b",provider="twilio",status="2xx"}`:      `0+60x20`,
			`notifier_provider_requests_total{instance="a",provider="twilio",status="429"}`:      `0+6x20`,
		},
		at: "10m",
		checks: []queryCheck{
			{"Limit decisions denied, by layer", "A", map[string]float64{`{layer="user"}`: 0.25, `{layer="leaky"}`: 0, `{layer="global"}`: 0}},
			{"Limit decisions denied, by layer", "B", map[string]float64{`{layer="global"}`: 0.1}},
			{"Provider request latency", "C", map[string]float64{`{provider="twilio"}`: 0.5}},
			{"Provider requests by status class", "A", map[string]float64{
				`{provider="twilio",status="2xx"}`: 2, `{provider="twilio",status="429"}`: 0.1,
			}},
		},
	},
	{
		name: "fleet",
		series: map[string]string{
			`notifier_ready{instance="a"}`:          `1x20`,
			`notifier_ready{instance="b"}`:          `0x20`,
			`notifier_ready{instance="c"}`:          `1x20`,
			`notifier_jobs_in_flight{instance="a"}`: `3x20`,
			`notifier_jobs_in_flight{instance="b"}`: `0x20`,
			`notifier_jobs_in_flight{instance="c"}`: `61x20`,
		},
		at: "10m",
		checks: []queryCheck{
			{"Instances ready", "A", map[string]float64{`{}`: 2}},
			{"Instances ready", "B", map[string]float64{`{}`: 3}},
			{"Jobs in flight", "A", map[string]float64{`{instance="a"}`: 3, `{instance="b"}`: 0, `{instance="c"}`: 61}},
			{"Jobs in flight", "B", map[string]float64{`{}`: 64}},
		},
	},
	{
		name: "deferrals, pauses, job latency, replays",
		series: map[string]string{
			`notifier_deferrals_total{instance="a",layer="leaky",reason="full"}`:                          `0+60x20`,
			`notifier_deferrals_total{instance="b",layer="leaky",reason="full"}`:                          `0+60x20`,
			`notifier_deferrals_total{instance="a",layer="user",reason="defer"}`:                          `0+6x20`,
			`notifier_provider_paused{instance="a",provider="twilio",reason="rate_limited"}`:              `1x20`,
			`notifier_provider_paused{instance="b",provider="twilio",reason="rate_limited"}`:              `1x20`,
			`notifier_provider_paused{instance="a",provider="twilio",reason="credentials"}`:               `0x20`,
			`notifier_provider_paused{instance="a",provider="fcm",reason="rate_limited"}`:                 `0x20`,
			`notifier_provider_paused{instance="a",provider="fcm",reason="credentials"}`:                  `1x20`,
			`notifier_provider_ambiguous_total{instance="a",provider="twilio"}`:                           `0+6x20`,
			`notifier_deliveries_total{instance="a",provider="twilio",status="delivered"}`:                `0+54x20`,
			`notifier_deliveries_total{instance="b",provider="twilio",status="undelivered"}`:              `0+6x20`,
			`notifier_job_latency_seconds_bucket{instance="a",channel="sms",provider="twilio",le="1"}`:    `0x20`,
			`notifier_job_latency_seconds_bucket{instance="a",channel="sms",provider="twilio",le="2"}`:    `0+60x20`,
			`notifier_job_latency_seconds_bucket{instance="a",channel="sms",provider="twilio",le="+Inf"}`: `0+60x20`,
			`notifier_replays_total{instance="a",channel="sms"}`:                                          `0+30x20`,
			`notifier_job_created_at_ignored_total{instance="a",channel="sms"}`:                           `0+6x20`,
			`notifier_job_created_at_ignored_total{instance="b",channel="sms"}`:                           `0+6x20`,
			`notifier_routed_total{instance="a"}`:                                                         `0+30x20`,
			`notifier_routed_total{instance="b"}`:                                                         `0+6x20`,
			`notifier_suppressions_total{instance="a",channel="sms"}`:                                     `0+6x20`,
			`notifier_digests_total{instance="a",channel="email"}`:                                        `0+12x20`,
			`notifier_provider_probes_total{instance="a",provider="twilio",result="refused"}`:             `0+3x20`,
			`notifier_provider_probes_total{instance="b",provider="twilio",result="refused"}`:             `0+3x20`,
		},
		at: "10m",
		checks: []queryCheck{
			{"Deferrals by layer and reason", "A", map[string]float64{`{layer="leaky",reason="full"}`: 2, `{layer="user",reason="defer"}`: 0.1}},
			// The fleet-wide pause once, not once per instance.
			{"Pauses (429, or refused credentials)", "A", map[string]float64{
				`{provider="twilio",reason="rate_limited"}`: 1, `{provider="twilio",reason="credentials"}`: 0,
				`{provider="fcm",reason="rate_limited"}`: 0, `{provider="fcm",reason="credentials"}`: 1,
			}},
			{"Ambiguous requests (outcome unknown)", "A", map[string]float64{`{provider="twilio"}`: 0.1}},
			{"Delivery reports by status", "A", map[string]float64{
				`{provider="twilio",status="delivered"}`: 0.9, `{provider="twilio",status="undelivered"}`: 0.1,
			}},
			{"Job latency p99, publish to provider acceptance", "A", map[string]float64{`{channel="sms",provider="twilio"}`: 1.99}},
			{"Dead letters replayed", "A", map[string]float64{`{channel="sms"}`: 0.5}},
			{"Jobs with a created_at after their send", "A", map[string]float64{`{channel="sms"}`: 0.2}},
			{"Jobs routed to their tenant's fair lane", "A", map[string]float64{`{}`: 0.6}},
			{"Recipients put on the suppression list", "A", map[string]float64{`{channel="sms"}`: 0.1}},
			{"Digest jobs published", "A", map[string]float64{`{channel="email"}`: 0.2}},
			{"Probes of providers paused for the sender", "A", map[string]float64{`{provider="twilio",result="refused"}`: 0.1}},
		},
	},
	{
		name: "tenants",
		series: map[string]string{
			`notifier_tenant_sent_total{instance="a",provider="twilio",tenant="acme"}`:  `0+90x20`,
			`notifier_tenant_sent_total{instance="b",provider="twilio",tenant="acme"}`:  `0+90x20`,
			`notifier_tenant_sent_total{instance="a",provider="fcm",tenant="acme"}`:     `0+60x20`,
			`notifier_tenant_sent_total{instance="a",provider="twilio",tenant="other"}`: `0+60x20`,
			`notifier_tenant_queued{instance="a",channel="sms",tenant="acme"}`:          `4000x20`,
			`notifier_tenant_queued{instance="b",channel="sms",tenant="acme"}`:          `4000x20`,
			`notifier_tenant_queued{instance="a",channel="sms",tenant="default"}`:       `12x20`,
		},
		at: "10m",
		checks: []queryCheck{
			// Summed over instances and providers.
			{"Sent by tenant", "A", map[string]float64{`{tenant="acme"}`: 4, `{tenant="other"}`: 1}},
			// The fleet-wide count once, not once per instance.
			{"Jobs waiting by tenant", "A", map[string]float64{`{channel="sms",tenant="acme"}`: 4000, `{channel="sms",tenant="default"}`: 12}},
		},
	},
	{
		name: "gateway",
		series: map[string]string{
			`notifier_gateway_requests_total{instance="a",key="acme-app",code="202"}`:        `0+600x20`,
			`notifier_gateway_requests_total{instance="b",key="acme-app",code="202"}`:        `0+600x20`,
			`notifier_gateway_requests_total{instance="a",key="acme-app",code="429"}`:        `0+120x20`,
			`notifier_gateway_requests_total{instance="a",key="unauthenticated",code="401"}`: `0+6x20`,
		},
		at: "10m",
		checks: []queryCheck{
			// Summed over the gateway instances, per key and code.
			{"Gateway requests by key and code", "A", map[string]float64{
				`{key="acme-app",code="202"}`: 20, `{key="acme-app",code="429"}`: 2, `{key="unauthenticated",code="401"}`: 0.1,
			}},
		},
	},
	{
		name: "provider shaping",
		series: map[string]string{
			`notifier_provider_effective_rate{instance="a",provider="twilio"}`:                         `70x20`,
			`notifier_provider_effective_rate{instance="b",provider="twilio"}`:                         `70x20`,
			`notifier_provider_contract{instance="a",provider="twilio"}`:                               `100x20`,
			`notifier_failovers_total{instance="a",from="twilio",to="twilio-b",reason="circuit_open"}`: `0+60x20`,
			`notifier_failovers_total{instance="b",from="twilio",to="twilio-b",reason="circuit_open"}`: `0+60x20`,
			`notifier_failovers_total{instance="a",from="twilio",to="twilio-b",reason="deadline"}`:     `0+6x20`,
		},
		at: "10m",
		checks: []queryCheck{
			// The fleet's one effective rate (every instance reads it from
			// Redis), beside the contract.
			{"Effective rate against the contract", "A", map[string]float64{`{provider="twilio"}`: 70}},
			{"Effective rate against the contract", "B", map[string]float64{`{provider="twilio"}`: 100}},
			{"Failovers by reason", "A", map[string]float64{
				`{from="twilio",to="twilio-b",reason="circuit_open"}`: 2, `{from="twilio",to="twilio-b",reason="deadline"}`: 0.1,
			}},
		},
	},
	{
		name: "nothing scraped",
		series: map[string]string{
			`up{instance="a",job="notifier"}`: `0x20`,
		},
		at: "10m",
		checks: []queryCheck{
			// 0 rather than "No data".
			{"Instances ready", "A", map[string]float64{`{}`: 0}},
		},
	},
}

// promtoolQueryGroups builds promtool test groups from queryCases, with
// the dashboard's expressions (every variable set to All).
func promtoolQueryGroups(t *testing.T) []promtoolGroup {
	t.Helper()
	d := loadDashboard(t)
	exprs := make(map[string]string)
	for _, p := range allPanels(d.Panels) {
		for _, tg := range p.Targets {
			exprs[p.Title+"/"+tg.RefID] = tg.Expr
		}
	}
	all := make(map[string]string)
	for _, v := range d.Templating.List {
		all[v.Name] = ".*"
	}
	var groups []promtoolGroup
	for _, c := range queryCases {
		g := promtoolGroup{Name: "dashboard: " + c.name, Interval: "1m"}
		for _, s := range slices.Sorted(maps.Keys(c.series)) {
			g.InputSeries = append(g.InputSeries, promtoolSeries{Series: s, Values: c.series[s]})
		}
		for _, ch := range c.checks {
			raw, ok := exprs[ch.panel+"/"+ch.ref]
			if !ok {
				t.Fatalf("case %q: the dashboard has no target %s in panel %q", c.name, ch.ref, ch.panel)
			}
			expr, err := substituteGrafana(raw, func(name string) (string, bool) {
				v, ok := all[name]
				return v, ok
			})
			if err != nil {
				t.Fatalf("panel %q target %s: %v", ch.panel, ch.ref, err)
			}
			q := promtoolQuery{Expr: expr, EvalTime: c.at}
			for _, l := range slices.Sorted(maps.Keys(ch.want)) {
				q.ExpSamples = append(q.ExpSamples, promtoolSample{Labels: l, Value: ch.want[l]})
			}
			g.QueryTests = append(g.QueryTests, q)
		}
		groups = append(groups, g)
	}
	return groups
}

// TestQueryCasesNameTargets: every query case names a dashboard target,
// and every panel has a case (rows aside) — without promtool too.
func TestQueryCasesNameTargets(t *testing.T) {
	t.Parallel()
	groups := promtoolQueryGroups(t)
	if len(groups) != len(queryCases) {
		t.Fatalf("%d groups for %d cases", len(groups), len(queryCases))
	}
	tested := make(set)
	for _, c := range queryCases {
		for _, ch := range c.checks {
			tested[ch.panel] = true
		}
	}
	var untested []string
	for _, p := range allPanels(loadDashboard(t).Panels) {
		if p.Type != "row" && !tested[p.Title] {
			untested = append(untested, fmt.Sprintf("%q", p.Title))
		}
	}
	if len(untested) > 0 {
		t.Errorf("panels without a query case in queryCases: %v", untested)
	}
}
