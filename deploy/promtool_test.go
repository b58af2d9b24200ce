package deploy_test

import (
	"bytes"
	"flag"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

// alertCase is one promtool rule unit test group: synthetic series
// (promtool's expanding notation, one sample a minute) and, at given
// times, which alerts fire.
type alertCase struct {
	name   string
	series map[string]string
	checks []alertCheck
}

type alertCheck struct {
	at    string // eval_time
	alert string
	want  []firing // none: the alert is not firing (inactive or pending)
}

// firing is one firing alert: the labels its expression gives (the rule's
// own labels are added) and its rendered summary. The description and the
// runbook are expected as the rule file has them (they are not templates).
type firing struct {
	labels  map[string]string
	summary string
}

var alertCases = []alertCase{
	{
		name: "queue latency near its bound",
		series: map[string]string{
			`notifier_provider_max_queue_delay_seconds{instance="a",provider="twilio"}`: `2x20`,
			`notifier_provider_max_queue_delay_seconds{instance="b",provider="twilio"}`: `2x20`,
			`notifier_provider_max_queue_delay_seconds{instance="a",provider="fcm"}`:    `2x20`,
			// twilio: every wait between 1.5 s and 2 s, p99 1.995 s > 1.6 s.
			`notifier_queue_latency_seconds_bucket{instance="a",provider="twilio",le="1"}`:    `0x20`,
			`notifier_queue_latency_seconds_bucket{instance="a",provider="twilio",le="1.5"}`:  `0x20`,
			`notifier_queue_latency_seconds_bucket{instance="a",provider="twilio",le="2"}`:    `0+60x20`,
			`notifier_queue_latency_seconds_bucket{instance="a",provider="twilio",le="+Inf"}`: `0+60x20`,
			// fcm: every wait under 0.5 s.
			`notifier_queue_latency_seconds_bucket{instance="a",provider="fcm",le="0.5"}`:  `0+60x20`,
			`notifier_queue_latency_seconds_bucket{instance="a",provider="fcm",le="2"}`:    `0+60x20`,
			`notifier_queue_latency_seconds_bucket{instance="a",provider="fcm",le="+Inf"}`: `0+60x20`,
		},
		checks: []alertCheck{
			{at: "5m", alert: "NotifierQueueLatencyNearBound"}, // pending since 1m
			{at: "6m", alert: "NotifierQueueLatencyNearBound", want: []firing{{
				labels:  map[string]string{"provider": "twilio"},
				summary: "twilio: queue latency p99 1.995s is over 80 % of max_queue_delay",
			}}},
		},
	},
	{
		name: "provider paused by 429s",
		series: map[string]string{
			`notifier_provider_paused{instance="a",provider="twilio",reason="rate_limited"}`: `1x20`,
			`notifier_provider_paused{instance="b",provider="twilio",reason="rate_limited"}`: `1x20`,
			// Short pauses now and then: not an alert.
			`notifier_provider_paused{instance="a",provider="fcm",reason="rate_limited"}`: `0 1 0 1 0 0 0 0 0 0 0 0 0 1 0 0 0 0 0 0 0`,
			// Paused from the 10th minute on.
			`notifier_provider_paused{instance="a",provider="apns",reason="rate_limited"}`: `0x9 1x11`,
			// A credentials pause is the other alert's.
			`notifier_provider_paused{instance="a",provider="ses",reason="credentials"}`: `1x20`,
		},
		checks: []alertCheck{
			{at: "1m", alert: "NotifierProviderPaused"}, // pending since 0m
			{at: "2m", alert: "NotifierProviderPaused", want: []firing{{
				labels:  map[string]string{"provider": "twilio"},
				summary: "twilio paused by 429 answers 100% of the last 5 minutes",
			}}},
			{at: "20m", alert: "NotifierProviderPaused", want: []firing{{
				labels:  map[string]string{"provider": "twilio"},
				summary: "twilio paused by 429 answers 100% of the last 5 minutes",
			}, {
				labels:  map[string]string{"provider": "apns"},
				summary: "apns paused by 429 answers 100% of the last 5 minutes",
			}}},
		},
	},
	{
		name: "provider refuses the sender",
		series: map[string]string{
			`notifier_provider_paused{instance="a",provider="twilio",reason="credentials"}`:  `0x4 1x16`,
			`notifier_provider_paused{instance="b",provider="twilio",reason="credentials"}`:  `0x4 1x16`,
			`notifier_provider_paused{instance="a",provider="twilio",reason="rate_limited"}`: `0x20`,
			// A 429 pause is not this alert's.
			`notifier_provider_paused{instance="a",provider="fcm",reason="rate_limited"}`: `1x20`,
		},
		checks: []alertCheck{
			{at: "4m", alert: "NotifierProviderCredentialsRefused"},
			{at: "5m", alert: "NotifierProviderCredentialsRefused"}, // pending
			{at: "6m", alert: "NotifierProviderCredentialsRefused", want: []firing{{
				labels:  map[string]string{"provider": "twilio"},
				summary: "twilio refuses the sender: paused, nothing is sent",
			}}},
		},
	},
	{
		name: "dead letters rising",
		series: map[string]string{
			// sms: 0.1/s for 80 minutes, then 2/s.
			`notifier_jobs_total{instance="a",channel="sms",provider="twilio",outcome="dead"}`: `0+6x80 486+120x40`,
			`notifier_jobs_total{instance="a",channel="sms",provider="twilio",outcome="sent"}`: `0+600x120`,
			// push: a steady 0.1/s is not rising.
			`notifier_jobs_total{instance="a",channel="push",provider="fcm",outcome="dead"}`: `0+6x120`,
			// email: no dead letter for 90 minutes, then 1/s.
			`notifier_jobs_total{instance="a",channel="email",provider="smtp",outcome="dead"}`: `_x90 0+60x30`,
		},
		checks: []alertCheck{
			{at: "80m", alert: "NotifierDeadLettersRising"},
			{at: "110m", alert: "NotifierDeadLettersRising", want: []firing{{
				labels:  map[string]string{"channel": "sms"},
				summary: "sms: 2 dead letters per second, more than twice the hour before",
			}, {
				labels:  map[string]string{"channel": "email"},
				summary: "email: 1 dead letters per second, more than twice the hour before",
			}}},
		},
	},
	{
		name: "provider error ratio",
		series: map[string]string{
			`notifier_provider_requests_total{instance="a",provider="twilio",status="2xx"}`: `0+60x20`,
			`notifier_provider_requests_total{instance="a",provider="twilio",status="5xx"}`: `0+30x20`,
			// A 429 is a rate limit, not an error.
			`notifier_provider_requests_total{instance="a",provider="fcm",status="2xx"}`:   `0+60x20`,
			`notifier_provider_requests_total{instance="a",provider="fcm",status="429"}`:   `0+30x20`,
			`notifier_provider_requests_total{instance="a",provider="fcm",status="error"}`: `0+1x20`,
		},
		checks: []alertCheck{
			{at: "5m", alert: "NotifierProviderErrorRatioHigh"}, // pending since 1m
			{at: "6m", alert: "NotifierProviderErrorRatioHigh", want: []firing{{
				labels:  map[string]string{"provider": "twilio"},
				summary: "twilio: 33.33% of provider requests fail with 5xx or no answer",
			}}},
		},
	},
	{
		name: "no instance ready",
		series: map[string]string{
			`notifier_ready{instance="a"}`: `1 1 0 0 0 0 0 0`,
			`notifier_ready{instance="b"}`: `0x7`,
		},
		checks: []alertCheck{
			{at: "1m", alert: "NotifierNoInstanceReady"},
			{at: "3m", alert: "NotifierNoInstanceReady"}, // pending since 2m
			{at: "4m", alert: "NotifierNoInstanceReady", want: []firing{{
				summary: "No notifier instance is ready: nothing is being sent",
			}}},
		},
	},
	{
		name: "no instance scraped",
		series: map[string]string{
			`up{instance="a",job="notifier"}`: `0x5`,
		},
		checks: []alertCheck{
			{at: "5m", alert: "NotifierNoInstanceReady", want: []firing{{
				summary: "No notifier instance is ready: nothing is being sent",
			}}},
		},
	},
	{
		name: "an instance ready",
		series: map[string]string{
			`notifier_ready{instance="a"}`: `0 1x9`,
			`notifier_ready{instance="b"}`: `0x10`,
		},
		checks: []alertCheck{
			{at: "10m", alert: "NotifierNoInstanceReady"},
		},
	},
	{
		name: "jobs stuck in flight",
		series: map[string]string{
			// a: holds jobs, ends none.
			`notifier_jobs_in_flight{instance="a"}`:                                            `64x40`,
			`notifier_jobs_total{instance="a",channel="sms",provider="twilio",outcome="sent"}`: `100x40`,
			// b: holds jobs and ends them.
			`notifier_jobs_in_flight{instance="b"}`:                                            `64x40`,
			`notifier_jobs_total{instance="b",channel="sms",provider="twilio",outcome="sent"}`: `0+60x40`,
			// c: idle.
			`notifier_jobs_in_flight{instance="c"}`: `0x40`,
			// d: holds jobs and has never ended one (no jobs_total series).
			`notifier_jobs_in_flight{instance="d"}`: `8x40`,
			// e: empties now and then.
			`notifier_jobs_in_flight{instance="e"}`: `5 0 5 0 5 0 5 0 5 0 5 0 5 0 5 0 5 0 5 0 5 0 5 0 5 0 5 0 5 0 5`,
		},
		checks: []alertCheck{
			{at: "4m", alert: "NotifierJobsInFlightStuck"}, // pending since 0m
			{at: "5m", alert: "NotifierJobsInFlightStuck", want: []firing{{
				labels:  map[string]string{"instance": "a"},
				summary: "a holds 64 jobs and ended none in 15 minutes",
			}, {
				labels:  map[string]string{"instance": "d"},
				summary: "d holds 8 jobs and ended none in 15 minutes",
			}}},
			{at: "20m", alert: "NotifierJobsInFlightStuck", want: []firing{{
				labels:  map[string]string{"instance": "a"},
				summary: "a holds 64 jobs and ended none in 15 minutes",
			}, {
				labels:  map[string]string{"instance": "d"},
				summary: "d holds 8 jobs and ended none in 15 minutes",
			}}},
		},
	},
	{
		name: "limit backend unavailable",
		series: map[string]string{
			`notifier_deferrals_total{instance="a",layer="redis",reason="unavailable"}`: `0+30x10`,
			`notifier_deferrals_total{instance="a",layer="leaky",reason="full"}`:        `0+300x10`,
		},
		checks: []alertCheck{
			{at: "2m", alert: "NotifierLimitBackendUnavailable"}, // pending since 1m
			{at: "3m", alert: "NotifierLimitBackendUnavailable", want: []firing{{
				labels: map[string]string{"layer": "redis"},
				// rate divides by the whole 5m; the series has 3 minutes yet.
				summary: "redis limit backend unreachable: 0.3 deferrals per second",
			}}},
			{at: "8m", alert: "NotifierLimitBackendUnavailable", want: []firing{{
				labels:  map[string]string{"layer": "redis"},
				summary: "redis limit backend unreachable: 0.5 deferrals per second",
			}}},
		},
	},
}

// TestAlertCasesCoverEveryRule: every alert has a case in which it fires.
func TestAlertCasesCoverEveryRule(t *testing.T) {
	t.Parallel()
	fires := make(set)
	for _, c := range alertCases {
		for _, ch := range c.checks {
			if len(ch.want) > 0 {
				fires[ch.alert] = true
			}
		}
	}
	rules := make(set)
	for _, r := range alertRules(loadRules(t)) {
		rules[r.Alert] = true
		if !fires[r.Alert] {
			t.Errorf("alert %s: no case in alertCases makes it fire", r.Alert)
		}
	}
	for a := range fires {
		if !rules[a] {
			t.Errorf("alertCases test %s, which %s does not define", a, rulesFile)
		}
	}
}

// promtool's rule unit test file format.
type promtoolFile struct {
	RuleFiles          []string        `yaml:"rule_files"`
	EvaluationInterval string          `yaml:"evaluation_interval"`
	Tests              []promtoolGroup `yaml:"tests"`
}

type promtoolGroup struct {
	Name        string           `yaml:"name"`
	Interval    string           `yaml:"interval"`
	InputSeries []promtoolSeries `yaml:"input_series"`
	AlertTests  []promtoolAlert  `yaml:"alert_rule_test,omitempty"`
	QueryTests  []promtoolQuery  `yaml:"promql_expr_test,omitempty"`
}

type promtoolQuery struct {
	Expr       string           `yaml:"expr"`
	EvalTime   string           `yaml:"eval_time"`
	ExpSamples []promtoolSample `yaml:"exp_samples"`
}

type promtoolSample struct {
	Labels string  `yaml:"labels"`
	Value  float64 `yaml:"value"`
}

type promtoolSeries struct {
	Series string `yaml:"series"`
	Values string `yaml:"values"`
}

type promtoolAlert struct {
	EvalTime  string             `yaml:"eval_time"`
	Alertname string             `yaml:"alertname"`
	ExpAlerts []promtoolExpAlert `yaml:"exp_alerts"`
}

type promtoolExpAlert struct {
	ExpLabels      map[string]string `yaml:"exp_labels"`
	ExpAnnotations map[string]string `yaml:"exp_annotations"`
}

// promtoolTests builds the unit test groups of alertCases, for the rules
// at rulesPath.
func promtoolTests(t *testing.T, rulesPath string) promtoolFile {
	t.Helper()
	byName := make(map[string]rule)
	for _, r := range alertRules(loadRules(t)) {
		byName[r.Alert] = r
	}
	f := promtoolFile{RuleFiles: []string{rulesPath}, EvaluationInterval: "1m"}
	for _, c := range alertCases {
		g := promtoolGroup{Name: c.name, Interval: "1m"}
		for _, s := range slices.Sorted(maps.Keys(c.series)) {
			g.InputSeries = append(g.InputSeries, promtoolSeries{Series: s, Values: c.series[s]})
		}
		for _, ch := range c.checks {
			r, ok := byName[ch.alert]
			if !ok {
				t.Fatalf("case %q: no alert %s", c.name, ch.alert)
			}
			a := promtoolAlert{EvalTime: ch.at, Alertname: ch.alert, ExpAlerts: []promtoolExpAlert{}}
			for _, w := range ch.want {
				labels := maps.Clone(r.Labels)
				maps.Copy(labels, w.labels)
				annotations := maps.Clone(r.Annotations)
				annotations["summary"] = w.summary
				a.ExpAlerts = append(a.ExpAlerts, promtoolExpAlert{ExpLabels: labels, ExpAnnotations: annotations})
			}
			g.AlertTests = append(g.AlertTests, a)
		}
		f.Tests = append(f.Tests, g)
	}
	return f
}

// promtoolTestFile is the promtool unit test file users run: alertCases
// and queryCases, with the rules found beside it (promtool reads
// rule_files relative to the test file).
const promtoolTestFile = "prometheus/alerts_test.yaml"

// promtoolTestFileHeader opens promtoolTestFile.
const promtoolTestFileHeader = `# promtool rule unit tests of alerts.yaml (every alert fires when its ` + "`for`" + `
# allows, with the labels and summary shown, and stays quiet where it should)
# and of the dashboard's queries (../grafana/notifier.json, every variable set
# to All: each panel shows what it promises). Run them with
#
#   promtool test rules deploy/prometheus/alerts_test.yaml
#
# Generated from deploy/promtool_test.go (alertCases) and deploy/queries_test.go
# (queryCases), with the rules' annotations and the dashboard's expressions as
# they are: edit those, then rewrite this file with
#
#   go test ./deploy/ -run TestPromtoolTestFileIsCurrent -update
#
# go test ./deploy/ fails while this file differs from what they generate.
`

var update = flag.Bool("update", false, "rewrite "+promtoolTestFile+" from alertCases and queryCases")

// generatePromtoolTests is promtoolTestFile as alertCases, queryCases, the
// rules and the dashboard make it now.
func generatePromtoolTests(t *testing.T) []byte {
	t.Helper()
	tests := promtoolTests(t, filepath.Base(rulesFile))
	tests.Tests = append(tests.Tests, promtoolQueryGroups(t)...)
	var b bytes.Buffer
	b.WriteString(promtoolTestFileHeader)
	enc := yaml.NewEncoder(&b)
	enc.SetIndent(2)
	if err := enc.Encode(tests); err != nil {
		t.Fatal(err)
	}
	if err := enc.Close(); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// TestPromtoolTestFileIsCurrent: the checked-in promtool test file is what
// the cases generate (with -update, it is rewritten so), so the file users
// run is the one these tests keep honest, promtool or not.
func TestPromtoolTestFileIsCurrent(t *testing.T) {
	t.Parallel()
	want := generatePromtoolTests(t)
	if *update {
		if err := os.WriteFile(promtoolTestFile, want, 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("wrote %s", promtoolTestFile)
		return
	}
	have, err := os.ReadFile(promtoolTestFile)
	if err != nil {
		t.Fatalf("%v; write it with: go test ./deploy/ -run TestPromtoolTestFileIsCurrent -update", err)
	}
	if !bytes.Equal(have, want) {
		hl, wl := strings.Split(string(have), "\n"), strings.Split(string(want), "\n")
		i := 0
		for i < len(hl) && i < len(wl) && hl[i] == wl[i] {
			i++
		}
		line := func(ls []string) string {
			if i < len(ls) {
				return ls[i]
			}
			return "(end of file)"
		}
		t.Fatalf("%s differs from what alertCases, queryCases, the rules and the dashboard generate, from line %d:\n"+
			"  file:      %s\n  generated: %s\nrewrite it with: go test ./deploy/ -run TestPromtoolTestFileIsCurrent -update",
			promtoolTestFile, i+1, line(hl), line(wl))
	}
}

// TestPromtool runs `promtool check rules` on the rules and `promtool test
// rules` on the checked-in test file, as a user would: every alert fires
// when and only when its case says, with the labels and summary it says,
// and the dashboard's queries give the values their panels promise.
func TestPromtool(t *testing.T) {
	t.Parallel()
	promtool, err := exec.LookPath("promtool")
	if err != nil {
		t.Skip("promtool is not on PATH, so `promtool check rules` and the unit tests of the alerts and the " +
			"dashboard's queries did not run; install it to run them (Debian: apt-get install prometheus, " +
			"or see docs/operations-dashboards.md for promtool alone)")
	}
	if out, err := exec.Command(promtool, "check", "rules", rulesFile).CombinedOutput(); err != nil {
		t.Fatalf("promtool check rules: %v\n%s", err, out)
	}
	out, err := exec.Command(promtool, "test", "rules", promtoolTestFile).CombinedOutput()
	if err != nil {
		t.Fatalf("promtool test rules %s: %v\n%s", promtoolTestFile, err, out)
	}
	if !strings.Contains(string(out), "SUCCESS") {
		t.Fatalf("promtool test rules: no SUCCESS in\n%s", out)
	}
}
