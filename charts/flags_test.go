package charts_test

import (
	"flag"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"chamber.dev/chamber/agent"
	"chamber.dev/chamber/controllers/options"
)

// flagRow is a row of a flags table in docs/reference/flags.md: "| `--name` | ...".
var flagRow = regexp.MustCompile("(?m)^\\| `--([a-z0-9-]+)` \\|")

// TestFlagsReference: docs/reference/flags.md has a table row for every flag each
// binary registers, and none for a flag it does not, so the reference users set
// controller.flags and agent.flags from stays true. --kubeconfig is registered by
// controller-runtime (the controller) and by the agent's main, not by AddFlags.
func TestFlagsReference(t *testing.T) {
	doc, err := os.ReadFile("../docs/reference/flags.md")
	if err != nil {
		t.Fatal(err)
	}
	controller, rest, ok := strings.Cut(string(doc), "## chamber-agent")
	if !ok {
		t.Fatal("docs/reference/flags.md has no \"## chamber-agent\" section")
	}
	controller, _, _ = strings.Cut(controller, "### chamber-controller uninstall")

	fs := flag.NewFlagSet("chamber-controller", flag.ContinueOnError)
	options.New().AddFlags(fs)
	cfg := agent.DefaultConfig()
	afs := flag.NewFlagSet("chamber-agent", flag.ContinueOnError)
	cfg.AddFlags(afs)
	for _, tc := range []struct {
		binary  string
		section string
		flags   *flag.FlagSet
	}{{"chamber-controller", controller, fs}, {"chamber-agent", rest, afs}} {
		want := []string{"kubeconfig"}
		tc.flags.VisitAll(func(f *flag.Flag) { want = append(want, f.Name) })
		var got []string
		for _, m := range flagRow.FindAllStringSubmatch(tc.section, -1) {
			got = append(got, m[1])
		}
		slices.Sort(want)
		slices.Sort(got)
		if diff := cmp.Diff(slices.Compact(want), got); diff != "" {
			t.Errorf("%s's flags in docs/reference/flags.md (-registered +documented):\n%s", tc.binary, diff)
		}
	}
}
