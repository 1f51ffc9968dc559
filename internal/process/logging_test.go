package process

import (
	"flag"
	"io"
	"strings"
	"testing"
)

// TestLogFlags checks the logging flags without applying a format (which
// would change the test process's logger): every klog flag is still there,
// --logging-format is added, and a non-text format refuses the klog flags
// it would ignore instead of silently ignoring them. The JSON format itself
// is exercised end to end.
func TestLogFlags(t *testing.T) {
	parse := func(args ...string) (*flag.FlagSet, *LogOptions, error) {
		fs := flag.NewFlagSet("test", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		o := AddLogFlags(fs)
		return fs, o, fs.Parse(args)
	}
	fs, _, err := parse()
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"v", "vmodule", "logtostderr", "alsologtostderr", "log_file", "log_dir", "skip_headers",
		"stderrthreshold", "add_dir_header", "one_output", "log_file_max_size", "skip_log_headers", "logging-format"} {
		if fs.Lookup(name) == nil {
			t.Errorf("flag --%s is not registered", name)
		}
	}

	for _, tc := range []struct {
		args []string
		want string // "" for no error
	}{
		{nil, ""},
		{[]string{"--logging-format=text", "-v=4", "--skip_headers"}, ""},
		{[]string{"--logging-format=xml"}, `--logging-format=xml: format: Invalid value: "xml": Unsupported log format`},
		{[]string{"--logging-format=json", "--log_file=/tmp/x", "--vmodule=a=1"},
			"--logging-format=json would ignore --log_file, --vmodule: of the klog flags, only -v applies to a format other than text"},
	} {
		fs, o, err := parse(tc.args...)
		if err != nil {
			t.Fatalf("%v: %v", tc.args, err)
		}
		err = o.Apply(fs)
		if (err == nil) != (tc.want == "") || (err != nil && !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("%v: Apply = %v, want %q", tc.args, err, tc.want)
		}
	}
}
