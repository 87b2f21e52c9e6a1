package isolation

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"

	chamber "chamber.dev/chamber/api/v1alpha1"
)

// record is what Chamber keeps on a node it isolated, in the node's annotations: they
// outlive a restart of Chamber and are what an operator reads. readRecord, write and
// changes are the only code that reads or writes them.
type record struct {
	// Isolated: the node carries chamber.AnnotationIsolatedAt. At is its time; zero when the
	// value is not a time (then the error of readRecord says so).
	Isolated bool
	At       time.Time
	// Reason names the fault, e.g. "XID79 on GPU 3".
	Reason string
	// Persistent: a hardware fault, which only an operator clears.
	Persistent bool
	// Level is the level applied: Node or GPU.
	Level chamber.IsolationLevel
	// GPUs are the failing GPUs' indices.
	GPUs []int
	// Tainted and Cordoned: Chamber added the taint and set spec.unschedulable, so
	// only then does it take them off again.
	Tainted, Cordoned bool
	// Healthy counts the agent's healthy reports since a transient fault cleared;
	// HealthyAt is the heartbeat of the last one counted (chamber.AnnotationIsolationHealthyReports
	// holds both, "N@<heartbeat>").
	Healthy   int
	HealthyAt time.Time
	// ClearedAt is when Chamber last ended an isolation on an operator's clear.
	ClearedAt time.Time
	// Preflight is the preflight Job ("namespace/name") running on the node after an
	// operator's clear; empty when none runs.
	Preflight string
}

// readRecord reads the node's record whole. An annotation whose value Chamber cannot
// read (written by hand, or by another version) leaves its field at its zero value,
// and the error names each such annotation, its value and what it should be, so that
// the caller can say so; the others are read.
func readRecord(n *corev1.Node) (record, error) {
	a := n.Annotations
	var r record
	var errs []error
	bad := func(key, want string) {
		errs = append(errs, fmt.Errorf("annotation %s=%q is not %s", key, a[key], want))
	}
	timeAt := func(key string, layout string) time.Time {
		s := a[key]
		if s == "" {
			return time.Time{}
		}
		t, err := time.Parse(layout, s)
		if err != nil {
			bad(key, "an RFC 3339 time")
		}
		return t
	}
	flag := func(key string) bool {
		s, ok := a[key]
		if !ok {
			return false
		}
		b, err := strconv.ParseBool(s)
		if err != nil {
			bad(key, `"true" or "false"`)
		}
		return b
	}

	r.Isolated = a[chamber.AnnotationIsolatedAt] != ""
	r.At = timeAt(chamber.AnnotationIsolatedAt, time.RFC3339)
	r.Reason = a[chamber.AnnotationIsolationReason]
	r.Persistent = flag(chamber.AnnotationIsolationPersistent)
	switch l := chamber.IsolationLevel(a[chamber.AnnotationIsolationLevel]); l {
	case "", chamber.IsolateNode, chamber.IsolateGPU:
		r.Level = l
	default:
		bad(chamber.AnnotationIsolationLevel, fmt.Sprintf("%s or %s", chamber.IsolateNode, chamber.IsolateGPU))
	}
	if gpus, err := chamber.ParseGPUIndices(a[chamber.AnnotationIsolatedGPUs]); err != nil {
		bad(chamber.AnnotationIsolatedGPUs, "a list of GPU indices, e.g. 3,5")
	} else {
		r.GPUs = gpus
	}
	r.Tainted = flag(chamber.AnnotationIsolationTainted)
	r.Cordoned = flag(chamber.AnnotationIsolationCordoned)
	if s, ok := a[chamber.AnnotationIsolationHealthyReports]; ok {
		count, at, found := strings.Cut(s, "@")
		n, errN := strconv.Atoi(count)
		t, errT := time.Parse(time.RFC3339Nano, at)
		if !found || errN != nil || n < 0 || errT != nil {
			bad(chamber.AnnotationIsolationHealthyReports, "a count and a heartbeat time, e.g. 2@2026-01-02T15:04:05.5Z")
		} else {
			r.Healthy, r.HealthyAt = n, t
		}
	}
	r.ClearedAt = timeAt(chamber.AnnotationIsolationClearedAt, time.RFC3339Nano)
	if s := a[chamber.AnnotationIsolationPreflight]; s != "" {
		if ns, name, ok := strings.Cut(s, "/"); !ok || ns == "" || name == "" {
			bad(chamber.AnnotationIsolationPreflight, "a Job's namespace/name")
		} else {
			r.Preflight = s
		}
	}
	return r, errors.Join(errs...)
}

// fields are the record's annotations as a patch (annotate): a value for each that is
// set, nil for each that is not. chamber.AnnotationIsolationClearedAt is left alone.
func (r record) fields() map[string]any {
	out := map[string]any{}
	set := func(key string, ok bool, value func() string) {
		if ok {
			out[key] = value()
		} else {
			out[key] = nil
		}
	}
	set(chamber.AnnotationIsolatedAt, r.Isolated, func() string { return r.At.UTC().Format(time.RFC3339) })
	set(chamber.AnnotationIsolationReason, r.Isolated, func() string { return r.Reason })
	set(chamber.AnnotationIsolationPersistent, r.Isolated, func() string { return strconv.FormatBool(r.Persistent) })
	set(chamber.AnnotationIsolationLevel, r.Isolated && r.Level != "", func() string { return string(r.Level) })
	set(chamber.AnnotationIsolatedGPUs, r.Isolated, func() string { return joinInts(r.GPUs) })
	set(chamber.AnnotationIsolationTainted, r.Tainted, func() string { return "true" })
	set(chamber.AnnotationIsolationCordoned, r.Cordoned, func() string { return "true" })
	set(chamber.AnnotationIsolationHealthyReports, r.Healthy > 0, func() string {
		return strconv.Itoa(r.Healthy) + "@" + r.HealthyAt.UTC().Format(time.RFC3339Nano)
	})
	set(chamber.AnnotationIsolationPreflight, r.Isolated && r.Preflight != "", func() string { return r.Preflight })
	return out
}

// changes are the annotations that differ from old to new, as a patch (annotate). An
// annotation old could not read is left as it is unless new changes its field.
func changes(old, new record) map[string]any {
	before, after := old.fields(), new.fields()
	out := map[string]any{}
	for k, v := range after {
		if v != before[k] {
			out[k] = v
		}
	}
	return out
}

// write sets the record's annotations on n (which is being updated); a record{}
// removes them all but chamber.AnnotationIsolationClearedAt.
func (r record) write(n *corev1.Node) {
	if n.Annotations == nil {
		n.Annotations = map[string]string{}
	}
	for k, v := range r.fields() {
		if s, ok := v.(string); ok {
			n.Annotations[k] = s
		} else {
			delete(n.Annotations, k)
		}
	}
}

func joinInts(xs []int) string {
	s := make([]string, len(xs))
	for i, x := range xs {
		s[i] = strconv.Itoa(x)
	}
	return strings.Join(s, ",")
}
