// Package process sets up the process around the controller before it
// connects anywhere: the Go runtime's memory limit and GC pace from the
// container's environment, the logging flags (klog's and
// --logging-format), and the shutdown signals.
package process
