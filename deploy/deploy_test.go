package deploy_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"text/template"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/promql/parser"
	"go.uber.org/goleak"
	"go.yaml.in/yaml/v3"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

const (
	dashboardFile = "grafana/notifier.json"
	rulesFile     = "prometheus/alerts.yaml"
	datasourceUID = "${datasource}"
)

// dashboard is the part of Grafana's dashboard JSON the tests read.
type dashboard struct {
	UID           string  `json:"uid"`
	Title         string  `json:"title"`
	SchemaVersion int     `json:"schemaVersion"`
	Panels        []panel `json:"panels"`
	Templating    struct {
		List []variable `json:"list"`
	} `json:"templating"`
}

type datasourceRef struct {
	Type string `json:"type"`
	UID  string `json:"uid"`
}

type panel struct {
	ID          int            `json:"id"`
	Type        string         `json:"type"`
	Title       string         `json:"title"`
	Description string         `json:"description"`
	Collapsed   bool           `json:"collapsed"`
	Datasource  *datasourceRef `json:"datasource"`
	GridPos     struct {
		H, W, X, Y int
	} `json:"gridPos"`
	Targets []target `json:"targets"`
	Panels  []panel  `json:"panels"` // a collapsed row's panels
}

type target struct {
	RefID        string         `json:"refId"`
	Expr         string         `json:"expr"`
	LegendFormat string         `json:"legendFormat"`
	Datasource   *datasourceRef `json:"datasource"`
}

type variable struct {
	Name       string          `json:"name"`
	Type       string          `json:"type"`
	Query      json.RawMessage `json:"query"` // a string, or {"query": "..."}
	Multi      bool            `json:"multi"`
	IncludeAll bool            `json:"includeAll"`
	Datasource *datasourceRef  `json:"datasource"`
}

// query is the variable's query text.
func (v variable) query() string {
	var s string
	if json.Unmarshal(v.Query, &s) == nil {
		return s
	}
	var q struct {
		Query string `json:"query"`
	}
	_ = json.Unmarshal(v.Query, &q)
	return q.Query
}

func loadDashboard(t *testing.T) dashboard {
	t.Helper()
	b, err := os.ReadFile(dashboardFile)
	if err != nil {
		t.Fatal(err)
	}
	var d dashboard
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatalf("parse %s: %v", dashboardFile, err)
	}
	return d
}

// allPanels flattens rows: a collapsed row holds its panels itself.
func allPanels(ps []panel) []panel {
	var out []panel
	for _, p := range ps {
		out = append(out, p)
		out = append(out, allPanels(p.Panels)...)
	}
	return out
}

// grafanaRef matches a template variable reference: $name, ${name},
// ${name:format} or [[name]].
var grafanaRef = regexp.MustCompile(`\$\{(\w+)(?::[^}]*)?\}|\$(\w+)|\[\[(\w+)(?::[^\]]*)?\]\]`)

// grafanaDurations are Grafana's built-in duration variables.
var grafanaDurations = newSet("__rate_interval", "__interval", "__range")

// expandGrafana replaces Grafana's variables in a PromQL expression: the
// built-in durations by 5m, the dashboard's variables by a marker the
// checker recognises. An undefined variable is an error.
func expandGrafana(expr string, vars set) (string, error) {
	return substituteGrafana(expr, func(name string) (string, bool) {
		return grafanaVar + name, vars[name]
	})
}

// substituteGrafana replaces the built-in durations by 5m and every other
// variable by what value returns for it; an unknown variable is an error.
func substituteGrafana(expr string, value func(name string) (string, bool)) (string, error) {
	var errs []error
	out := grafanaRef.ReplaceAllStringFunc(expr, func(ref string) string {
		m := grafanaRef.FindStringSubmatch(ref)
		name := m[1] + m[2] + m[3]
		if grafanaDurations[name] {
			return "5m"
		}
		if v, ok := value(name); ok {
			return v
		}
		errs = append(errs, fmt.Errorf("undefined variable %s", ref))
		return ref
	})
	return out, errors.Join(errs...)
}

// legendRef matches a {{label}} in a legend format.
var legendRef = regexp.MustCompile(`\{\{\s*(\w+)\s*\}\}`)

func TestDashboardStructure(t *testing.T) {
	t.Parallel()
	d := loadDashboard(t)
	if d.SchemaVersion < 39 {
		t.Errorf("schemaVersion %d, want 39 or later", d.SchemaVersion)
	}
	if d.UID == "" || d.Title == "" {
		t.Errorf("uid %q, title %q: both are needed for a stable import", d.UID, d.Title)
	}

	vars := make(map[string]variable)
	for _, v := range d.Templating.List {
		vars[v.Name] = v
	}
	if ds, ok := vars["datasource"]; !ok || ds.Type != "datasource" || ds.query() != "prometheus" {
		t.Errorf("variable datasource: %+v, want a Prometheus data source variable", ds)
	}
	prov, ok := vars["provider"]
	switch {
	case !ok:
		t.Error("no provider variable")
	case prov.Type != "query" || !prov.Multi:
		t.Errorf("variable provider: type %q multi %v, want a multi-value query variable", prov.Type, prov.Multi)
	case prov.query() != "label_values(notifier_provider_contract, provider)":
		t.Errorf("variable provider: query %q", prov.query())
	case prov.Datasource == nil || prov.Datasource.UID != datasourceUID:
		t.Errorf("variable provider: datasource %+v, want uid %s", prov.Datasource, datasourceUID)
	}

	ids := make(map[int]string)
	var placed []panel
	for _, p := range allPanels(d.Panels) {
		if p.ID <= 0 {
			t.Errorf("panel %q: id %d", p.Title, p.ID)
		}
		if other, dup := ids[p.ID]; dup {
			t.Errorf("panels %q and %q share id %d", other, p.Title, p.ID)
		}
		ids[p.ID] = p.Title
		g := p.GridPos
		if g.W < 1 || g.H < 1 || g.X < 0 || g.Y < 0 || g.X+g.W > 24 {
			t.Errorf("panel %q: gridPos %+v outside the 24-column grid", p.Title, g)
		}
		if p.Title == "" {
			t.Errorf("panel %d: no title", p.ID)
		}
		if p.Type == "row" {
			if len(p.Targets) > 0 {
				t.Errorf("row %q has targets", p.Title)
			}
			continue
		}
		placed = append(placed, p)
		if p.Description == "" {
			t.Errorf("panel %q: no description", p.Title)
		}
		if p.Datasource == nil || p.Datasource.Type != "prometheus" || p.Datasource.UID != datasourceUID {
			t.Errorf("panel %q: datasource %+v, want prometheus %s", p.Title, p.Datasource, datasourceUID)
		}
		if len(p.Targets) == 0 {
			t.Errorf("panel %q: no targets", p.Title)
		}
		refs := make(map[string]bool)
		for _, tg := range p.Targets {
			if strings.TrimSpace(tg.Expr) == "" {
				t.Errorf("panel %q target %s: no expr", p.Title, tg.RefID)
			}
			if tg.RefID == "" || refs[tg.RefID] {
				t.Errorf("panel %q: refId %q missing or repeated", p.Title, tg.RefID)
			}
			refs[tg.RefID] = true
			if tg.Datasource != nil && tg.Datasource.UID != datasourceUID {
				t.Errorf("panel %q target %s: datasource %+v", p.Title, tg.RefID, tg.Datasource)
			}
		}
	}
	for i, a := range placed {
		for _, b := range placed[i+1:] {
			ga, gb := a.GridPos, b.GridPos
			if ga.X < gb.X+gb.W && gb.X < ga.X+ga.W && ga.Y < gb.Y+gb.H && gb.Y < ga.Y+ga.H {
				t.Errorf("panels %q %+v and %q %+v overlap", a.Title, ga, b.Title, gb)
			}
		}
	}
}

// dashboardUsage checks every query of the dashboard and returns, per
// panel title, the series names it selects.
func dashboardUsage(t *testing.T, c *checker, d dashboard) map[string]set {
	t.Helper()
	vars := make(set)
	for _, v := range d.Templating.List {
		vars[v.Name] = true
		if v.Multi {
			c.multi[v.Name] = true
		}
	}
	used := make(map[string]set)
	for _, v := range d.Templating.List {
		m := labelValuesQuery.FindStringSubmatch(v.query())
		if v.Type != "query" || m == nil {
			continue
		}
		u, err := c.check(m[1])
		if err != nil {
			t.Errorf("variable %s: %v", v.Name, err)
			continue
		}
		if !c.available(u.expr)[m[2]] {
			t.Errorf("variable %s: %s has no label %s", v.Name, m[1], m[2])
		}
		used["$"+v.Name] = u.metrics
	}
	for _, p := range allPanels(d.Panels) {
		used[p.Title] = make(set)
		for _, tg := range p.Targets {
			expr, err := expandGrafana(tg.Expr, vars)
			if err != nil {
				t.Errorf("panel %q target %s: %v", p.Title, tg.RefID, err)
				continue
			}
			u, err := c.check(expr)
			if err != nil {
				t.Errorf("panel %q target %s: %v", p.Title, tg.RefID, err)
				continue
			}
			if typ := u.expr.Type(); typ != parser.ValueTypeVector && typ != parser.ValueTypeScalar {
				t.Errorf("panel %q target %s: a %s, not a vector or scalar", p.Title, tg.RefID, typ)
			}
			for _, m := range legendRef.FindAllStringSubmatch(tg.LegendFormat, -1) {
				if !u.out[m[1]] {
					t.Errorf("panel %q target %s: legend uses {{%s}}, the query's result has only %v",
						p.Title, tg.RefID, m[1], u.out.sorted())
				}
			}
			for name := range u.metrics {
				used[p.Title][name] = true
			}
		}
	}
	return used
}

// labelValuesQuery matches Grafana's label_values(metric, label).
var labelValuesQuery = regexp.MustCompile(`^label_values\((.+),\s*(\w+)\)$`)

func TestDashboardQueries(t *testing.T) {
	t.Parallel()
	c := newChecker(t)
	used := dashboardUsage(t, c, loadDashboard(t))

	// The panels issue 7 asks for, found by what they query.
	want := []struct {
		what    string
		metrics []string
		mention string // in the panel's description
	}{
		{"queue latency against max_queue_delay", []string{"notifier_queue_latency_seconds_bucket", "notifier_provider_max_queue_delay_seconds"}, "max_queue_delay"},
		{"sent rate against contract", []string{"notifier_jobs_total", "notifier_provider_contract"}, "segments"},
		{"outcomes by channel/outcome", []string{"notifier_jobs_total"}, "Notifier-Reason"},
		{"deferrals by layer/reason", []string{"notifier_deferrals_total"}, ""},
		{"provider requests by status class", []string{"notifier_provider_requests_total"}, ""},
		{"provider request latency", []string{"notifier_provider_request_seconds_bucket"}, ""},
		{"pauses (429 or credentials)", []string{"notifier_provider_paused"}, "429"},
		{"leaky queue depth", []string{"notifier_leaky_queue_depth"}, ""},
		{"instances ready", []string{"notifier_ready"}, ""},
		{"jobs in flight", []string{"notifier_jobs_in_flight"}, ""},
	}
	descriptions := make(map[string]string)
	for _, p := range allPanels(loadDashboard(t).Panels) {
		descriptions[p.Title] = p.Description
	}
	for _, w := range want {
		found := false
		for title, metrics := range used {
			if !strings.Contains(descriptions[title], w.mention) {
				continue
			}
			all := true
			for _, m := range w.metrics {
				all = all && metrics[m]
			}
			found = found || all
		}
		if !found {
			t.Errorf("no panel shows %s (querying %v, describing %q)", w.what, w.metrics, w.mention)
		}
	}
}

// TestDashboardShowsEveryMetric fails when the notifier exports a metric
// the dashboard does not show: add a panel, or a target to one.
func TestDashboardShowsEveryMetric(t *testing.T) {
	t.Parallel()
	c := newChecker(t)
	used := make(set)
	for _, metrics := range dashboardUsage(t, c, loadDashboard(t)) {
		for m := range metrics {
			used[c.exported[m].family] = true
		}
	}
	for name, s := range c.exported {
		if name == s.family || s.typ == dto.MetricType_HISTOGRAM && name == s.family+"_bucket" {
			if !used[s.family] {
				t.Errorf("the dashboard does not show %s", s.family)
			}
		}
	}
}

// ruleFile is Prometheus's rule file format (rulefmt), read strictly.
type ruleFile struct {
	Groups []ruleGroup `yaml:"groups"`
}

type ruleGroup struct {
	Name     string `yaml:"name"`
	Interval string `yaml:"interval"`
	Rules    []rule `yaml:"rules"`
}

type rule struct {
	Alert         string            `yaml:"alert"`
	Record        string            `yaml:"record"`
	Expr          string            `yaml:"expr"`
	For           string            `yaml:"for"`
	KeepFiringFor string            `yaml:"keep_firing_for"`
	Labels        map[string]string `yaml:"labels"`
	Annotations   map[string]string `yaml:"annotations"`
}

func loadRules(t *testing.T) ruleFile {
	t.Helper()
	b, err := os.ReadFile(rulesFile)
	if err != nil {
		t.Fatal(err)
	}
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	var f ruleFile
	if err := dec.Decode(&f); err != nil {
		t.Fatalf("parse %s: %v", rulesFile, err)
	}
	return f
}

// alertRules lists every rule of the file.
func alertRules(f ruleFile) []rule {
	var out []rule
	for _, g := range f.Groups {
		out = append(out, g.Rules...)
	}
	return out
}

var (
	alertName = regexp.MustCompile(`^[A-Z][A-Za-z0-9]*$`)
	severity  = newSet("critical", "warning", "info")
)

func TestAlertRules(t *testing.T) {
	t.Parallel()
	c := newChecker(t)
	f := loadRules(t)
	if len(f.Groups) == 0 {
		t.Fatal("no rule groups")
	}
	groups, alerts := make(set), make(set)
	used := make(set)
	for _, g := range f.Groups {
		if g.Name == "" || groups[g.Name] {
			t.Errorf("group name %q empty or repeated", g.Name)
		}
		groups[g.Name] = true
		if g.Interval != "" {
			if _, err := model.ParseDuration(g.Interval); err != nil {
				t.Errorf("group %s: interval: %v", g.Name, err)
			}
		}
		if len(g.Rules) == 0 {
			t.Errorf("group %s: no rules", g.Name)
		}
		for _, r := range g.Rules {
			name := r.Alert
			if name == "" || r.Record != "" {
				t.Errorf("group %s: rule %q%q is not an alerting rule", g.Name, r.Alert, r.Record)
				continue
			}
			if !alertName.MatchString(name) || alerts[name] {
				t.Errorf("alert %q: want a unique CamelCase name", name)
			}
			alerts[name] = true
			if d, err := model.ParseDuration(r.For); err != nil || d <= 0 {
				t.Errorf("alert %s: for %q: want a positive duration (%v)", name, r.For, err)
			}
			if r.KeepFiringFor != "" {
				if _, err := model.ParseDuration(r.KeepFiringFor); err != nil {
					t.Errorf("alert %s: keep_firing_for: %v", name, err)
				}
			}
			if !severity[r.Labels["severity"]] {
				t.Errorf("alert %s: severity %q, want one of %v", name, r.Labels["severity"], severity.sorted())
			}
			for k := range r.Labels {
				if !model.LegacyValidation.IsValidLabelName(k) {
					t.Errorf("alert %s: label name %q", name, k)
				}
			}
			for _, k := range []string{"summary", "description", "runbook"} {
				if strings.TrimSpace(r.Annotations[k]) == "" {
					t.Errorf("alert %s: no %s annotation", name, k)
				}
			}
			if err := checkRunbook(r.Annotations["runbook"]); err != nil {
				t.Errorf("alert %s: runbook: %v", name, err)
			}

			u, err := c.check(r.Expr)
			if err != nil {
				t.Errorf("alert %s: %v", name, err)
				continue
			}
			if u.expr.Type() != parser.ValueTypeVector {
				t.Errorf("alert %s: expr is a %s, an alert needs a vector", name, u.expr.Type())
			}
			for k, text := range r.Annotations {
				if err := expandAnnotation(text, u.out); err != nil {
					t.Errorf("alert %s: annotation %s: %v", name, k, err)
				}
			}
			for m := range u.metrics {
				used[m] = true
			}
		}
	}
	// The conditions issue 7 asks alerts for.
	for _, m := range []string{
		"notifier_queue_latency_seconds_bucket", "notifier_provider_max_queue_delay_seconds",
		"notifier_provider_paused", "notifier_ready", "notifier_provider_requests_total",
		"notifier_jobs_in_flight", "notifier_jobs_total",
	} {
		if !used[m] {
			t.Errorf("no alert uses %s", m)
		}
	}
}

// expandAnnotation executes an annotation template the way Prometheus
// does (the same $labels, $value and $externalLabels definitions), with
// only the labels the expression's result carries: a reference to
// another label fails.
func expandAnnotation(text string, labels set) error {
	const defs = "{{$labels := .Labels}}{{$externalLabels := .ExternalLabels}}" +
		"{{$externalURL := .ExternalURL}}{{$value := .Value}}"
	num := func(v any) string { return fmt.Sprint(v) }
	funcs := template.FuncMap{
		"humanize": num, "humanize1024": num, "humanizeDuration": num,
		"humanizePercentage": num, "humanizeTimestamp": num,
		"toUpper": strings.ToUpper, "toLower": strings.ToLower, "title": strings.ToTitle,
	}
	tmpl, err := template.New("annotation").Funcs(funcs).Option("missingkey=error").Parse(defs + text)
	if err != nil {
		return err
	}
	data := struct {
		Labels, ExternalLabels map[string]string
		ExternalURL            string
		Value                  float64
	}{Labels: make(map[string]string), ExternalLabels: map[string]string{}, Value: 0.5}
	for l := range labels {
		data.Labels[l] = "x"
	}
	if err := tmpl.Execute(new(bytes.Buffer), data); err != nil {
		return fmt.Errorf("%w (the result's labels: %v)", err, labels.sorted())
	}
	return nil
}

// checkRunbook checks that a runbook hint names a Markdown file of the
// repository and one of its headings: README.md#sizing.
func checkRunbook(hint string) error {
	file, anchor, ok := strings.Cut(hint, "#")
	if !ok || !strings.HasSuffix(file, ".md") {
		return fmt.Errorf("%q: want FILE.md#heading", hint)
	}
	b, err := os.ReadFile(filepath.Join("..", filepath.FromSlash(file)))
	if err != nil {
		return err
	}
	for line := range strings.Lines(string(b)) {
		if h, ok := strings.CutPrefix(line, "#"); ok && headingAnchor(strings.TrimLeft(h, "#")) == anchor {
			return nil
		}
	}
	return fmt.Errorf("%s has no heading with anchor #%s", file, anchor)
}

// headingAnchor is GitHub's anchor for a Markdown heading: lower case,
// punctuation dropped, spaces to hyphens.
func headingAnchor(h string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(strings.TrimSpace(h)) {
		switch {
		case r == ' ':
			b.WriteRune('-')
		case r == '-' || r == '_' || r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r > 127:
			b.WriteRune(r)
		}
	}
	return b.String()
}
