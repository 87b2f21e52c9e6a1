// Command chamber is Chamber's command line: the demo now, the simulator and fleet
// status later. It also works as a kubectl plugin (kubectl-chamber).
package main

import (
	"fmt"
	"os"
)

const usage = `usage: chamber <command> [flags]

commands:
  demo    a local control plane with simulated GPU nodes, Kueue and Chamber, running a workload
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
