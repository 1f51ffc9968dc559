package enrich

import (
	"bytes"
	"fmt"
	"strings"
	"testing"
	"time"
)

// Each parser is fuzzed for the two promises made of a record it cannot
// read: no crash, and the record passed through, never dropped.

// fuzzStream runs input through the fixture and returns the output; the
// only error allowed is one about the options, not about a record.
func fuzzStream(t *testing.T, opts Options, input []byte) []byte {
	var o bytes.Buffer
	opts.Skew = time.Second
	e := NewEnricher(fixture(t), opts, &o, &bytes.Buffer{})
	if err := e.Stream("fuzz", bytes.NewReader(input)); err != nil {
		if opts.Format == FormatCSV || strings.Contains(err.Error(), "fields") || strings.Contains(err.Error(), "gzip") {
			return nil // a header that names no usable fields, or a broken gzip stream
		}
		t.Fatalf("Stream: %v", err)
	}
	return o.Bytes()
}

// kept reports whether every line of input, but header lines, is in out:
// as it was, or (a JSON object) with a key added before its end.
func kept(input, out []byte, isHeader func([]byte) bool) error {
	for line := range bytes.Lines(input) {
		line = bytes.TrimRight(line, "\r\n")
		if len(bytes.TrimSpace(line)) == 0 || isHeader(line) {
			continue
		}
		want := line
		if body := bytes.TrimRight(line, " \t\r"); len(body) > 1 && body[0] == '{' && body[len(body)-1] == '}' {
			want = bytes.TrimRight(body[:len(body)-1], " \t\r\n")
		}
		if !bytes.Contains(out, want) {
			return fmt.Errorf("line %q is not in the output %q", line, out)
		}
	}
	return nil
}

func FuzzAWS(f *testing.F) {
	f.Add([]byte(awsHeader + "\n2 1 eni-1 10.0.0.1 10.0.0.2 1 2 6 1 1 1795773610 1795773620 ACCEPT OK\n"))
	f.Add([]byte("2 1 eni-1 - - - - - - - 1795773610 1795773620 - NODATA\nstart srcaddr\n1795773610 fd00::7\nx y\n"))
	f.Fuzz(func(t *testing.T, input []byte) {
		if bytes.HasPrefix(input, []byte{0x1f, 0x8b}) {
			return
		}
		out := fuzzStream(t, Options{Format: FormatAWS}, input)
		if out == nil {
			return
		}
		if err := kept(input, out, func(l []byte) bool { return l[0] >= 'a' && l[0] <= 'z' && isAWSHeader(l) }); err != nil {
			t.Fatal(err)
		}
		if err := sameInParallel(t, Options{Format: FormatAWS}, input, 1+len(input)%97); err != nil {
			t.Fatal(err)
		}
	})
}

func FuzzGCP(f *testing.F) {
	f.Add([]byte(`{"jsonPayload":{"connection":{"src_ip":"10.0.0.1","dest_ip":"fd00::7"},"start_time":"2026-11-27T10:00:10Z","end_time":"2026-11-27T10:00:11Z"}}` + "\n{}\n[1]\n"))
	f.Fuzz(func(t *testing.T, input []byte) {
		if bytes.HasPrefix(input, []byte{0x1f, 0x8b}) {
			return
		}
		out := fuzzStream(t, Options{Format: FormatGCP}, input)
		if err := kept(input, out, func([]byte) bool { return false }); err != nil {
			t.Fatal(err)
		}
	})
}

func FuzzJSONL(f *testing.F) {
	f.Add([]byte(`{"ts":1795773610123,"a":{"ip":"10.0.0.1"}}` + "\n" + `{"ts":"2026-11-27T10:00:10.5+01:00","a":{"ip":"x"}}` + "\n{\"ts\":1e300}\n"))
	f.Fuzz(func(t *testing.T, input []byte) {
		if bytes.HasPrefix(input, []byte{0x1f, 0x8b}) {
			return
		}
		out := fuzzStream(t, Options{Format: FormatJSONL, TimeField: "ts", AddressFields: []string{"a.ip"}}, input)
		if err := kept(input, out, func([]byte) bool { return false }); err != nil {
			t.Fatal(err)
		}
	})
}

func FuzzCSV(f *testing.F) {
	f.Add([]byte("t,ip\n1795773610,10.0.0.1\n\"x,y\n2026-11-27T10:00:10Z,fd00::7\n"))
	f.Add([]byte("t,ip\n1,2,3\n\"a\"b,c\n"))
	f.Fuzz(func(t *testing.T, input []byte) {
		if bytes.HasPrefix(input, []byte{0x1f, 0x8b}) {
			return
		}
		var o, w bytes.Buffer
		e := NewEnricher(fixture(t), Options{Format: FormatCSV, TimeField: "t", AddressFields: []string{"ip"}}, &o, &w)
		if err := e.Stream("fuzz", bytes.NewReader(input)); err != nil {
			return // no header row naming t and ip: nothing is a record
		}
		// Each record is enriched or passed through: as many records
		// out as in.
		if got := int64(bytes.Count(o.Bytes(), []byte("\n"))); got < e.Stats.Records+e.Stats.Unparsed {
			t.Fatalf("%d records and %d unparsed, but %d lines out: %q", e.Stats.Records, e.Stats.Unparsed, got, o.Bytes())
		}
	})
}
