package uninstall

import (
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
)

// Report is what HandBack changed, or in a dry run would change.
type Report struct {
	DryRun  bool     `json:"dryRun"`
	Changes []Change `json:"changes"`
	// Notes are what the operator should know: APIs the cluster does not serve, nodes
	// back in service that Chamber had isolated for a hardware fault.
	Notes []string `json:"notes,omitempty"`
}

// Change is one object changed, and how.
type Change struct {
	Step Step `json:"step"`
	// Object is kind/name or kind/namespace/name.
	Object string `json:"object"`
	// Change says what was done to it, e.g. "remove taint chamber.dev/gpu-unhealthy; uncordon".
	Change string `json:"change"`
}

// Count is how many objects the step changed.
func (r *Report) Count(step Step) int {
	n := 0
	for _, c := range r.Changes {
		if c.Step == step {
			n++
		}
	}
	return n
}

// Print writes the report for people: a table of the changes, their count by step,
// and the notes.
func (r *Report) Print(w io.Writer) error {
	switch {
	case len(r.Changes) == 0 && r.DryRun:
		fmt.Fprintln(w, "Dry run: nothing of Chamber's is left to hand back.")
	case len(r.Changes) == 0:
		fmt.Fprintln(w, "Nothing of Chamber's is left to hand back.")
	case r.DryRun:
		fmt.Fprintln(w, "Dry run: nothing was changed. Uninstall would:")
	default:
		fmt.Fprintln(w, "Handed back to Kueue alone:")
	}
	if len(r.Changes) > 0 {
		t := tabwriter.NewWriter(w, 0, 8, 3, ' ', 0)
		fmt.Fprintln(t, "STEP\tOBJECT\tCHANGE")
		for _, c := range r.Changes {
			fmt.Fprintf(t, "%s\t%s\t%s\n", c.Step, c.Object, c.Change)
		}
		if err := t.Flush(); err != nil {
			return err
		}
		var counts []string
		var seen []Step
		for _, c := range r.Changes {
			if !slices.Contains(seen, c.Step) {
				seen = append(seen, c.Step)
				counts = append(counts, fmt.Sprintf("%s %d", c.Step, r.Count(c.Step)))
			}
		}
		fmt.Fprintf(w, "\n%d objects: %s\n", len(r.Changes), strings.Join(counts, ", "))
	}
	for _, n := range r.Notes {
		fmt.Fprintln(w, "Note: "+n)
	}
	return nil
}
