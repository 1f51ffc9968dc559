// Command kubectl-ptp is a kubectl plugin that answers "who has this IP?"
// from podtoip-controller's PodToIps and "who had this IP at 14:05?" from
// its IPHistory objects. With kubectl-ptp on PATH it runs as kubectl ptp.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"
	"time"

	"k8s.io/cli-runtime/pkg/genericiooptions"
)

// version is set at build time (make build: -X main.version=...).
var version = "dev"

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], genericiooptions.IOStreams{In: os.Stdin, Out: os.Stdout, ErrOut: os.Stderr}, time.Now)
	stop()
	os.Exit(code)
}
