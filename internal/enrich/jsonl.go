package enrich

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
)

// gcpFields are where a GCP VPC Flow Logs entry keeps its addresses and
// its window (RFC 3339).
var gcpFields = jsonFields{
	time: "jsonPayload.start_time", end: "jsonPayload.end_time",
	addrs: []string{"jsonPayload.connection.src_ip", "jsonPayload.connection.dest_ip"},
}

// jsonFields locate a JSON record's time and addresses, as dotted paths.
type jsonFields struct {
	time, end string
	addrs     []string
}

// jsonLines enriches one JSON object per line: GCP VPC Flow Logs entries
// (format gcp-vpc) or any records (jsonl, with --time-field and
// --address-fields).
func (e *Enricher) jsonLines(in *lines, format string) error {
	f := gcpFields
	if format == FormatJSONL {
		if e.opts.TimeField == "" || len(e.opts.AddressFields) == 0 {
			return fmt.Errorf("%s: jsonl records need --time-field and --address-fields to say where their time and addresses are", in.name)
		}
		f = jsonFields{time: e.opts.TimeField, end: e.opts.EndField, addrs: e.opts.AddressFields}
	}
	for {
		line, raw, ok, err := in.next()
		if err != nil || !ok {
			return err
		}
		if len(bytes.TrimSpace(line)) == 0 {
			e.out.Write(raw)
			e.out.WriteByte('\n')
			continue
		}
		var obj map[string]any
		d := json.NewDecoder(bytes.NewReader(line))
		d.UseNumber()
		if err := d.Decode(&obj); err != nil || d.More() || obj == nil {
			e.unparsed(in, raw, "not a JSON object")
			continue
		}
		values, err := f.read(obj)
		if err != nil {
			e.unparsed(in, raw, err.Error())
			continue
		}
		answers := e.answers(len(f.addrs))
		for i, a := range f.addrs {
			e.lookup([]byte(values.get(a)), values.from, values.to, &answers[i])
		}
		e.record(answers)
		if e.opts.Output == FormatCSV {
			names := append([]string{f.time}, f.addrs...)
			if f.end != "" {
				names = append([]string{f.time, f.end}, f.addrs...)
			}
			row := make([]string, len(names))
			for i, n := range names {
				row[i] = values.get(n)
			}
			e.writeTable(names, row, f.addrs, answers)
			continue
		}
		e.writeJSON(raw, f.addrs, answers)
	}
}

// jsonValues are a record's fields by path, as strings, and its window.
type jsonValues struct {
	fields   map[string]string
	from, to int64
}

func (v jsonValues) get(path string) string { return v.fields[path] }

// read finds f's fields in obj. A missing address is no address; a
// missing or unreadable time makes the record unparsed.
func (f jsonFields) read(obj map[string]any) (jsonValues, error) {
	v := jsonValues{fields: map[string]string{}}
	for _, p := range append([]string{f.time, f.end}, f.addrs...) {
		if p == "" {
			continue
		}
		if s, ok := lookupPath(obj, p); ok {
			v.fields[p] = s
		}
	}
	t, ok := v.fields[f.time]
	if !ok {
		return v, fmt.Errorf("no %s", f.time)
	}
	var err error
	if v.from, err = parseTime(t); err != nil {
		return v, fmt.Errorf("%s: %w", f.time, err)
	}
	v.to = v.from
	if end, ok := v.fields[f.end]; ok && f.end != "" {
		if v.to, err = parseTime(end); err != nil {
			return v, fmt.Errorf("%s: %w", f.end, err)
		}
		v.to = max(v.to, v.from)
	}
	return v, nil
}

// lookupPath returns the string or number at a dotted path.
func lookupPath(obj map[string]any, path string) (string, bool) {
	var cur any = obj
	for part := range strings.SplitSeq(path, ".") {
		m, ok := cur.(map[string]any)
		if !ok {
			return "", false
		}
		if cur, ok = m[part]; !ok {
			return "", false
		}
	}
	switch x := cur.(type) {
	case string:
		return x, true
	case json.Number:
		return x.String(), true
	}
	return "", false
}
