// Package deploy holds what operators install beside the notifier binary,
// with no Go API of its own: the observability files
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
// and the artefacts that run it (docs/deploying.md says how to use each):
//
//   - ../Dockerfile, the container image: a static binary on distroless,
//     non-root, HEALTHCHECK on /healthz through `notifier healthcheck`;
//   - compose/compose.yaml, the whole system on one machine: NATS 2.10 with
//     JetStream, Redis, two `notifier run`, the gateway, the sandbox
//     providers and Prometheus (compose/config.yaml, compose/prometheus.yml);
//   - systemd/notifier.service and notifier-gateway.service, hardened units;
//   - kubernetes/*.yaml, the run and gateway Deployments with their probes,
//     PodDisruptionBudgets, the gateway's Service and the ConfigMap.
//
// artefacts_test.go checks each as far as a machine without a Docker
// engine or a cluster can: the Dockerfile parsed and its build stage's
// command run (the binary must be static, the HEALTHCHECK's command must
// pass against /healthz); the compose file decoded strictly into a typed
// model (services, images, healthchecks, every mounted file and every
// NOTIFIER_ variable taking effect); the systemd units' keys (and
// systemd-analyze verify where installed); the manifests decoded strictly
// into the Kubernetes API types (k8s.io/api), with grace periods longer
// than a stop of the configuration they mount can take.
//
// The package's tests keep the dashboard and the alerts honest: every PromQL expression is parsed
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
