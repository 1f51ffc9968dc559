package main

import (
	"context"
	"fmt"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/cli-runtime/pkg/genericiooptions"
)

// options are what every command shares: the streams, the kubeconfig
// flags, -o, and the clock.
type options struct {
	streams genericiooptions.IOStreams
	flags   *genericclioptions.ConfigFlags
	output  string
	now     func() time.Time
}

const rootLong = `Who has, and who had, a pod's IP address.

who-has and conflicts read the PodToIps that podtoip-controller keeps, one
per pod with an address; who-had and history read its IPHistory objects,
one per address, which record who held it within the retention window,
and who-had the IPHistoryCoverage that says when the history vouches for
them; enrich reads all of them to name the pods of a flow log's addresses.
An address may be given in any spelling of either family: 10.244.1.7,
010.244.001.007, fd00::1:7, FD00:0:0:0:0:0:1:7, ::ffff:10.244.1.7.

Times are printed as RFC 3339 in UTC, as the API stores them.

` + exitCodesHelp

// newRootCommand builds kubectl ptp and its commands.
func newRootCommand(o *options) *cobra.Command {
	root := &cobra.Command{
		Use:   "ptp",
		Short: "Who has, and who had, a pod's IP address",
		Long:  rootLong,
		Annotations: map[string]string{
			cobra.CommandDisplayNameAnnotation: "kubectl ptp",
		},
		SilenceErrors: true,
		SilenceUsage:  true,
		PersistentPreRunE: func(cmd *cobra.Command, _ []string) error {
			if cmd.Name() == "export" {
				return nil // its own formats (export)
			}
			return checkOutput(o.output)
		},
	}
	// The commands make no discovery calls, so there is no cache to place.
	o.flags.CacheDir = nil
	o.flags.AddFlags(root.PersistentFlags())
	root.PersistentFlags().Lookup("namespace").Usage = "Only pods of this namespace (who-has, who-had, conflicts, enrich). All namespaces when unset. For check, where it tries a forged PodToIp."
	root.PersistentFlags().StringVarP(&o.output, "output", "o", "", "Output format: json or yaml. A table when unset. For export: parquet, csv or jsonl.")
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usageError(err) })
	root.CompletionOptions.DisableDefaultCmd = true
	// Declared now rather than when a command runs, so that the search for
	// the command knows --help takes no value: "--help --kubeconfig FILE"
	// would otherwise take FILE for a command.
	root.InitDefaultHelpFlag()
	root.AddCommand(newWhoHasCommand(o), newWhoHadCommand(o), newHistoryCommand(o), newConflictsCommand(o), newCheckCommand(o), newEnrichCommand(o), newExportCommand(o), newVersionCommand(o))
	return root
}

func newVersionCommand(o *options) *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the version of kubectl-ptp",
		Args:  cobra.NoArgs,
		Run: func(*cobra.Command, []string) {
			fmt.Fprintln(o.streams.Out, "kubectl-ptp", version)
		},
	}
}

// run runs the command line args and returns the exit code, having
// printed the answer, or why there is none, to streams.
func run(ctx context.Context, args []string, streams genericiooptions.IOStreams, now func() time.Time) int {
	o := &options{streams: streams, flags: genericclioptions.NewConfigFlags(false), now: now}
	root := newRootCommand(o)
	root.SetArgs(args)
	root.SetIn(streams.In)
	root.SetOut(streams.Out)
	root.SetErr(streams.ErrOut)
	cmd, err := root.ExecuteContextC(ctx)
	code := exitCode(err)
	switch code {
	case exitFound:
	case exitNotFound, exitNotCovered, exitCheckFailed:
		fmt.Fprintln(streams.ErrOut, err)
	case exitUsage:
		fmt.Fprintf(streams.ErrOut, "error: %v\nSee '%s --help' for usage.\n", err, cmd.CommandPath())
	default:
		fmt.Fprintf(streams.ErrOut, "error: %v\n", err)
	}
	return code
}

// client connects to the cluster. The PodToIps listed are those of the
// namespace given with -n, or of all namespaces: an address may be held
// anywhere, so the kubeconfig's namespace does not narrow a lookup.
func (o *options) client(cmd *cobra.Command) (*client, error) {
	namespace := ""
	if f := cmd.Flag("namespace"); f != nil && f.Changed {
		namespace = *o.flags.Namespace
	}
	return newClient(o.flags, namespace)
}

// flagsFor returns the kubeconfig flags with the context name instead of
// --context: the same kubeconfig files, credentials and overrides.
func (o *options) flagsFor(name string) *genericclioptions.ConfigFlags {
	f := genericclioptions.NewConfigFlags(false)
	f.KubeConfig, f.Context = o.flags.KubeConfig, &name
	f.Impersonate, f.ImpersonateUID, f.ImpersonateGroup = o.flags.Impersonate, o.flags.ImpersonateUID, o.flags.ImpersonateGroup
	f.Timeout, f.Insecure, f.TLSServerName = o.flags.Timeout, o.flags.Insecure, o.flags.TLSServerName
	f.WrapConfigFn = o.flags.WrapConfigFn
	return f
}

// oneAddress accepts exactly one argument, the address.
func oneAddress(cmd *cobra.Command, args []string) error {
	if len(args) != 1 {
		return usageErrorf("%s needs one ADDRESS, such as 10.244.1.7 or fd00::1:7; got %d arguments", cmd.Name(), len(args))
	}
	return nil
}
