// Command chamber is Chamber's command line: the demo and the fleet
// simulator. It also works as a kubectl plugin (kubectl-chamber).
package main

import (
	"fmt"
	"os"
)

const usage = `usage: chamber <command> [flags]

commands:
  demo    a local control plane with simulated GPU nodes, Kueue and Chamber, running a workload
  sim     replay a GPU cluster trace under plain Kubernetes, Kueue and Kueue + Chamber, and report
`

func main() {
	if len(os.Args) < 2 {
		fmt.Fprint(os.Stderr, usage)
		os.Exit(2)
	}
	var err error
	switch os.Args[1] {
	case "demo":
		err = runDemo(os.Args[2:])
	case "sim":
		err = runSim(os.Args[2:])
	case "-h", "--help", "help":
		fmt.Print(usage)
		return
	default:
		fmt.Fprintf(os.Stderr, "chamber: unknown command %q\n%s", os.Args[1], usage)
		os.Exit(2)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "chamber %s: %v\n", os.Args[1], err)
		os.Exit(1)
	}
}
