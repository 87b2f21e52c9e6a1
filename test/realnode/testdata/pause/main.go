// Command pause is a pod sandbox's process, as registry.k8s.io/pause's: it waits for
// SIGTERM or SIGINT. The test node builds its pause image from it: the machine has
// no registry to pull one from.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	c := make(chan os.Signal, 1)
	signal.Notify(c, syscall.SIGTERM, syscall.SIGINT)
	<-c
}
