// Package charts holds the files of Chamber's Helm chart that Go code needs too, so
// that the chart and the code share one copy.
package charts

import _ "embed"

// VolcanoSchedulerConfig is vc-scheduler's configuration for Chamber's Volcano pools
// (chamber/files/volcano-scheduler.conf), which users give Volcano's own chart
// (custom.scheduler_config_override) and the local control plane runs.
//
//go:embed chamber/files/volcano-scheduler.conf
var VolcanoSchedulerConfig string
