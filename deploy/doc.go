// Package deploy holds what operators install beside the notifier binary,
// with no Go API of its own:
//
//   - grafana/notifier.json, a Grafana dashboard (schema 39, a Prometheus
//     data source variable and a multi-value provider variable): queue
//     latency against max_queue_delay, sent rate against each contract,
//     outcomes, deferrals, limit decisions, provider calls and pauses, leaky
//     queue depth, instances ready and jobs in flight;
//   - prometheus/alerts.yaml, Prometheus alerting rules: queue latency near
//     its bound, a provider paused by 429s, dead letters rising, provider
//     errors, no instance ready, jobs stuck in flight, the limit backend
//     unreachable;
//   - prometheus/alerts_test.yaml, their promtool unit tests and those of
//     the dashboard's queries: `promtool test rules
//     deploy/prometheus/alerts_test.yaml`.
//
// The package's tests keep both honest: every PromQL expression is parsed
// with Prometheus's own parser, every metric it selects must be one that
// dispatch.NewMetrics registers (so renaming a metric fails them), every
// label matched or grouped by must exist on the metric, enumerated label
// values (outcome, status, layer, decision, reason) must be ones the
// notifier sets, and the rules' structure and annotation templates are
// checked. alerts_test.yaml is generated from the cases in the tests, and
// they fail while it differs (go test ./deploy/ -run
// TestPromtoolTestFileIsCurrent -update rewrites it). Where promtool is on
// PATH the tests also run `promtool check rules` and `promtool test rules`
// on that file: every alert fires when its `for` allows and stays quiet
// where it should, and every panel's queries give the values the panel
// promises. docs/operations-dashboards.md explains how to install and read
// them.
package deploy
