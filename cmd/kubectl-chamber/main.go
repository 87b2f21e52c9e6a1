// Command kubectl-chamber is Chamber's kubectl plugin: the fleet's GPUs by state, the
// teams' quotas and use, why a job waits, and the operator's return of a repaired
// node, read from the cluster's objects through the user's kubeconfig (kubectl's own
// flags: --kubeconfig, --context, -n); the fleet page in a browser, signed in as the
// user; and the hand-back of the cluster before Chamber is removed. Installed on the
// PATH, kubectl runs it as `kubectl chamber`.
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/util/duration"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"chamber.dev/chamber/fleet/prices"
	chamberkueue "chamber.dev/chamber/integrations/kueue"
)

var scheme = chamberkueue.NewScheme()

func main() {
	if err := newRoot(streams{Out: os.Stdout, ErrOut: os.Stderr}, nil).Execute(); err != nil {
		os.Exit(1)
	}
}

// streams are where the commands write.
type streams struct{ Out, ErrOut io.Writer }

// options are the flags every command shares.
type options struct {
	// kubeconfig and overrides are kubectl's connection flags (--kubeconfig,
	// --context, -n, --as, ...), bound as kubectl binds them (client-go's clientcmd).
	kubeconfig string
	overrides  clientcmd.ConfigOverrides
	output     string
	// priceTable and factors price the nodes as chamber-controller's flags of the
	// same names do (docs/concepts/prices.md).
	priceTable string
	factors    prices.Factors
	streams    streams
	// now is the clock ages are measured on.
	now func() time.Time
	// newClient connects to the cluster.
	newClient func() (client.Client, error)
}

// newRoot is the plugin's command. connect, when set, replaces the connection the
// kubeconfig flags describe.
func newRoot(out streams, connect func() (client.Client, error)) *cobra.Command {
	o := &options{streams: out, now: time.Now, newClient: connect, factors: prices.DefaultFactors()}
	if o.newClient == nil {
		o.newClient = func() (client.Client, error) {
			cfg, err := o.clientConfig().ClientConfig()
			if err != nil {
				return nil, err
			}
			cfg.UserAgent = "kubectl-chamber"
			return client.New(cfg, client.Options{Scheme: scheme})
		}
	}
	root := &cobra.Command{
		Use:           "kubectl-chamber",
		Short:         "Chamber's view of the GPU fleet: GPUs by state, teams, why a job waits",
		SilenceUsage:  true,
		SilenceErrors: false,
		Annotations:   map[string]string{cobra.CommandDisplayNameAnnotation: "kubectl chamber"},
	}
	root.SetOut(out.Out)
	root.SetErr(out.ErrOut)
	root.PersistentFlags().StringVar(&o.kubeconfig, clientcmd.RecommendedConfigPathFlag, "", "path to the kubeconfig file (else $KUBECONFIG, else ~/.kube/config)")
	clientcmd.BindOverrideFlags(&o.overrides, root.PersistentFlags(), clientcmd.RecommendedConfigOverrideFlags(""))
	root.PersistentFlags().StringVarP(&o.output, "output", "o", "", "output format: wide, json or yaml (a table when empty)")
	root.PersistentFlags().StringVar(&o.priceTable, "price-table", "", "a price table (CSV, the columns of chamber-controller's --price-table) over the shipped one, to price the nodes as the controller does")
	root.PersistentFlags().Float64Var(&o.factors.Spot, "spot-price-factor", o.factors.Spot, "the share of the on-demand price a spot node costs, as chamber-controller's flag")
	root.PersistentFlags().Float64Var(&o.factors.Reserved, "reserved-price-factor", o.factors.Reserved, "the share of the on-demand price a reserved node costs, as chamber-controller's flag")
	root.AddCommand(o.statusCommand(), o.gpusCommand(), o.nodesCommand(), o.teamsCommand(), o.whyCommand(), o.isolateCommand(), o.clearCommand(),
		o.uninstallCommand(), o.dashboardCommand(), o.exportTraceCommand())
	return root
}

// checkOutput rejects an output format the command does not print.
func (o *options) checkOutput() error {
	switch o.output {
	case "", "wide", "json", "yaml":
		return nil
	}
	return fmt.Errorf("--output %q: want wide, json or yaml, or none for a table", o.output)
}

// structured prints v as JSON or YAML when -o asks for it; false when a table is wanted.
func (o *options) structured(v any) (bool, error) {
	switch o.output {
	case "json":
		enc := json.NewEncoder(o.streams.Out)
		enc.SetIndent("", "  ")
		return true, enc.Encode(v)
	case "yaml":
		out, err := yaml.Marshal(v)
		if err != nil {
			return true, err
		}
		_, err = o.streams.Out.Write(out)
		return true, err
	}
	return false, nil
}

func (o *options) wide() bool { return o.output == "wide" }

// clientConfig is the kubeconfig with the flags' overrides, as kubectl loads it.
func (o *options) clientConfig() clientcmd.ClientConfig {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = o.kubeconfig
	return clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &o.overrides)
}

// namespace is -n, else the kubeconfig context's namespace.
func (o *options) namespace() (string, error) {
	ns, _, err := o.clientConfig().Namespace()
	return ns, err
}

func (o *options) context(cmd *cobra.Command) (context.Context, context.CancelFunc) {
	return context.WithTimeout(cmd.Context(), 30*time.Second)
}

// table writes rows under a header, columns aligned as kubectl aligns them.
type table struct{ w *tabwriter.Writer }

func newTable(out io.Writer, header ...string) *table {
	t := &table{w: tabwriter.NewWriter(out, 0, 8, 3, ' ', 0)}
	t.row(header...)
	return t
}

func (t *table) row(cells ...string) {
	fmt.Fprintln(t.w, strings.Join(cells, "\t"))
}

func (t *table) flush() error { return t.w.Flush() }

// age prints a duration as kubectl's AGE column does (duration.HumanDuration); a
// negative one (a clock ahead of ours) as 0s.
func age(d time.Duration) string {
	return duration.HumanDuration(max(d, 0))
}

// orNone prints "<none>" for an empty cell, as kubectl does.
func orNone(s string) string {
	if s == "" {
		return "<none>"
	}
	return s
}
