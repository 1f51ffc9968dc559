package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/cli-runtime/pkg/printers"
)

// resultVersion is the apiVersion of the answers who-has, who-had and
// conflicts print with -o json|yaml. They are documented structures of
// this plugin (docs/ptp.md), not API objects: the version says which
// shape a script reads.
var resultVersion = schema.GroupVersion{Group: "kubectl-ptp.example.com", Version: "v1"}

// outputFormats are the values of -o besides the default table.
var outputFormats = []string{"json", "yaml"}

// checkOutput refuses an -o the commands do not print.
func checkOutput(format string) error {
	if format == "" {
		return nil
	}
	for _, f := range outputFormats {
		if format == f {
			return nil
		}
	}
	return usageErrorf("-o %q is not an output format: use -o json or -o yaml, or leave it out for a table", format)
}

// printObject prints obj in format, json or yaml, as kubectl does.
func printObject(out io.Writer, format string, obj runtime.Object) error {
	p, err := genericclioptions.NewJSONYamlPrintFlags().ToPrinter(format)
	if err != nil {
		return usageError(err)
	}
	return p.PrintObj(obj, out)
}

// resultType is the TypeMeta of a printed answer of kind.
func resultType(kind string) metav1.TypeMeta {
	return metav1.TypeMeta{APIVersion: resultVersion.String(), Kind: kind}
}

// deepCopy copies an answer through JSON, which is all it is made of.
func deepCopy[T any](in *T) *T {
	data, err := json.Marshal(in)
	if err != nil {
		panic(fmt.Sprintf("copying %T: %v", in, err))
	}
	out := new(T)
	if err := json.Unmarshal(data, out); err != nil {
		panic(fmt.Sprintf("copying %T: %v", in, err))
	}
	return out
}

// table writes rows in kubectl's column layout.
type table struct {
	out io.Writer
	buf bytes.Buffer
	w   interface {
		io.Writer
		Flush() error
	}
}

func newTable(out io.Writer, header ...string) *table {
	t := &table{out: out}
	t.w = printers.GetNewTabWriter(&t.buf)
	t.row(header...)
	return t
}

// row writes one row.
func (t *table) row(cells ...string) {
	fmt.Fprintln(t.w, strings.Join(cells, "\t"))
}

// flush writes the table out, without the spaces that pad an empty last
// cell.
func (t *table) flush() error {
	if err := t.w.Flush(); err != nil {
		return err
	}
	for line := range strings.Lines(t.buf.String()) {
		if _, err := io.WriteString(t.out, strings.TrimRight(line, " \n")+"\n"); err != nil {
			return err
		}
	}
	return nil
}

// orNone is s, or <none> when it is empty, as kubectl writes an empty cell.
func orNone(s string) string {
	if s == "" {
		return "<none>"
	}
	return s
}
