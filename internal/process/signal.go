package process

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"k8s.io/klog/v2"
)

// SignalContext returns a context cancelled by the first SIGINT or SIGTERM,
// so the controller can finish its writes in flight; a second signal exits
// at once with exitCode, for an operator who will not wait.
func SignalContext(exitCode int) context.Context {
	ctx, cancel := context.WithCancel(context.Background())
	ch := make(chan os.Signal, 2)
	signal.Notify(ch, os.Interrupt, syscall.SIGTERM)
	go func() {
		sig := <-ch
		klog.Background().Info("Received signal, shutting down gracefully; send it again to exit at once", "signal", sig.String())
		cancel()
		<-ch
		klog.Flush()
		os.Exit(exitCode)
	}()
	return ctx
}
