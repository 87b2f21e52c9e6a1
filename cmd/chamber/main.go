// Command chamber is Chamber's command line: the demo and the fleet
// simulator. It also works as a kubectl plugin (kubectl-chamber).
package main

import (
	"fmt"
	"os"
)

const usage = `usage: chamber <command> [flags]

commands:
  demo         the simulator's short scenario (about 4 minutes): a slice of a real GPU trace
               under plain Kubernetes, Kueue and Kueue + Chamber, and a report comparing them
  sim          the full comparison (make bench); every parameter is a flag: chamber sim -h
  whatif       two replays of one trace (chamber sim --trace) side by side: each team's wait,
               idle GPU-hours and cost before and after a change of the fleet
  borrow-demo  two teams share a pool: one borrows the other's idle GPUs, then gives them back
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
	case "whatif":
		err = runWhatIf(os.Args[2:])
	case "borrow-demo":
		err = runBorrowDemo(os.Args[2:])
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
