// Package dashboards holds Chamber's Prometheus rules (prometheus-rules.yaml: recording
// rules and alerts) and, later, its Grafana dashboards: the one source the Helm chart
// ships. Its tests check the rules with the real promtool.
package dashboards
