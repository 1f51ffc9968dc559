package process

import (
	"flag"
	"fmt"
	"sort"
	"strconv"
	"strings"

	logsapi "k8s.io/component-base/logs/api/v1"
	"k8s.io/klog/v2"

	// Registers --logging-format=json, as in Kubernetes components.
	_ "k8s.io/component-base/logs/json/register"
)

// LogOptions are the logging flags: every klog flag, as before, and
// --logging-format from k8s.io/component-base/logs, so that the log (and
// the attribution trail in it) can be written as JSON lines
// for a log pipeline, exactly as kube-scheduler or kube-controller-manager
// write theirs.
//
// The text format is klog's own output, configured by klog's flags
// (--log_file, --skip_headers, ...), unchanged. Kubernetes components
// route text through component-base as well, which would silently ignore
// those flags; here they keep working. Another format writes through its
// own backend and honours only -v, so combining it with another klog flag
// is an error rather than a flag that quietly does nothing.
type LogOptions struct {
	config *logsapi.LoggingConfiguration
	// klog holds klog's flags, bound to klog's global configuration; they
	// are also registered on the command line.
	klog *flag.FlagSet
}

// AddLogFlags registers the logging flags on fs.
func AddLogFlags(fs *flag.FlagSet) *LogOptions {
	o := &LogOptions{config: logsapi.NewLoggingConfiguration(), klog: flag.NewFlagSet("klog", flag.ContinueOnError)}
	klog.InitFlags(o.klog)
	o.klog.VisitAll(func(f *flag.Flag) { fs.Var(f.Value, f.Name, f.Usage) })
	// component-base's own --logging-format, bound to its configuration.
	// Its other flags (-v, --vmodule, alpha options behind feature gates)
	// are not offered: klog's -v and --vmodule are already there.
	var all flag.FlagSet
	logsapi.AddGoFlags(o.config, &all)
	fs.Var(all.Lookup("logging-format").Value, "logging-format",
		`Log format: "text" (klog's, configured by the klog flags) or "json" (one JSON object per line, as Kubernetes components write with the same flag; only -v of the klog flags applies).`)
	return o
}

// Apply configures logging from the parsed flags of fs. It must run before
// anything logs.
func (o *LogOptions) Apply(fs *flag.FlagSet) error {
	if o.config.Format == logsapi.DefaultLogFormat {
		return nil // klog, as its flags say
	}
	var ignored []string
	fs.Visit(func(f *flag.Flag) {
		if o.klog.Lookup(f.Name) != nil && f.Name != "v" {
			ignored = append(ignored, "--"+f.Name)
		}
	})
	if len(ignored) > 0 {
		sort.Strings(ignored)
		return fmt.Errorf("--logging-format=%s would ignore %s: of the klog flags, only -v applies to a format other than text",
			o.config.Format, strings.Join(ignored, ", "))
	}
	v, err := strconv.ParseUint(o.klog.Lookup("v").Value.String(), 10, 31)
	if err != nil {
		return fmt.Errorf("-v=%s: %w", o.klog.Lookup("v").Value, err)
	}
	o.config.Verbosity = logsapi.VerbosityLevel(v)
	if err := logsapi.ValidateAndApply(o.config, nil); err != nil {
		return fmt.Errorf("--logging-format=%s: %w", o.config.Format, err)
	}
	return nil
}
