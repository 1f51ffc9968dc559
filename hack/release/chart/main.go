// Command chart generates the Helm chart charts/podtoip-controller from the
// kustomization in artifacts/, and renders it as `helm template` would,
// with Helm's own packages (no helm binary needed).
//
// Usage:
//
//	go run ./chart generate -artifacts DIR -out DIR
//	go run ./chart render -chart DIR [-namespace NS] [-set key=value,...]
//
// render prints the manifests in the order `helm install -n NS` applies
// them (NS podtoip-system unless given), for `kubectl apply -f -`.
package main

import (
	"flag"
	"fmt"
	"os"

	"example.com/podtoip-controller/hack/release/internal/helmchart"
)

func main() {
	if len(os.Args) < 2 {
		usage()
	}
	switch os.Args[1] {
	case "generate":
		fs := flag.NewFlagSet("generate", flag.ExitOnError)
		artifacts := fs.String("artifacts", "", "The kustomization to make the chart from (artifacts/).")
		out := fs.String("out", "", "The chart's directory; replaced.")
		_ = fs.Parse(os.Args[2:])
		if *artifacts == "" || *out == "" || fs.NArg() > 0 {
			usage()
		}
		files, err := chartFiles(*artifacts)
		if err != nil {
			fail("generate the chart: %v", err)
		}
		if err := writeChart(*out, files); err != nil {
			fail("write the chart: %v", err)
		}
		fmt.Printf("wrote the chart to %s (%d files)\n", *out, len(files))
	case "render":
		fs := flag.NewFlagSet("render", flag.ExitOnError)
		chartDir := fs.String("chart", "", "The chart's directory.")
		set := fs.String("set", "", "Values, as helm's --set: key=value,key2=value2.")
		ns := fs.String("namespace", helmchart.DefaultNamespace, "The release's namespace, as helm install -n: where the controller goes unless namespaceOverride is set.")
		_ = fs.Parse(os.Args[2:])
		if *chartDir == "" || fs.NArg() > 0 {
			usage()
		}
		out, err := helmchart.Manifests(*chartDir, helmchart.Options{Namespace: *ns, Set: *set})
		if err != nil {
			fail("render %s: %v", *chartDir, err)
		}
		fmt.Print(out)
	default:
		usage()
	}
}

func usage() {
	fmt.Fprintln(os.Stderr, "usage:\n  chart generate -artifacts DIR -out DIR\n  chart render -chart DIR [-namespace NS] [-set key=value,...]")
	os.Exit(2)
}

func fail(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "FAIL: "+format+"\n", args...)
	os.Exit(1)
}
