// Package dashboards holds Chamber's Prometheus rules (prometheus-rules.yaml: recording
// rules and alerts) and its Grafana dashboards (grafana/*.json): the one source the
// Helm chart ships (make generate copies them into the chart). Its tests check the
// rules and the panels' queries with the real promtool, run every query on a real
// Prometheus scraping the series the metrics reference documents, and fail on a
// metric it does not document.
package dashboards
