package enrich

import (
	"bytes"
	"fmt"
	"slices"
	"strings"
)

// defaultAWSFields is the default format of VPC Flow Logs (version 2).
var defaultAWSFields = strings.Fields("version account-id interface-id srcaddr dstaddr srcport dstport protocol packets bytes start end action log-status")

// awsAddressFields are the fields enriched, where the format has them.
var awsAddressFields = []string{"srcaddr", "dstaddr", "pkt-srcaddr", "pkt-dstaddr"}

// awsFormat is the field order of aws-vpc records, from a header line,
// --fields or the default.
type awsFormat struct {
	names              []string
	addrs              []int // indexes of the address fields
	start, end, status int   // -1 when absent
	header             []byte
	headerWritten      bool
}

func newAWSFormat(names []string, clusters bool) (*awsFormat, error) {
	f := &awsFormat{names: names, start: slices.Index(names, "start"), end: slices.Index(names, "end"), status: slices.Index(names, "log-status")}
	for i, n := range names {
		if slices.Contains(awsAddressFields, n) {
			f.addrs = append(f.addrs, i)
		}
	}
	if f.start < 0 {
		return nil, fmt.Errorf("the fields %q have no start: a record's time is needed; give --fields with start (and end)", strings.Join(names, " "))
	}
	if len(f.addrs) == 0 {
		return nil, fmt.Errorf("the fields %q have no address (srcaddr, dstaddr, pkt-srcaddr, pkt-dstaddr) to enrich", strings.Join(names, " "))
	}
	if f.end < 0 {
		f.end = f.start
	}
	var h []string
	h = append(h, names...)
	for _, i := range f.addrs {
		h = append(h, enrichedColumns(names[i], clusters)...)
	}
	f.header = []byte(strings.Join(h, " "))
	return f, nil
}

// enrichedColumns names the columns appended for address field name;
// with several clusters, one names each holder's.
func enrichedColumns(name string, clusters bool) []string {
	if clusters {
		return []string{name + "-namespace", name + "-pod", name + "-pod-uid", name + "-node", name + "-cluster", name + "-match"}
	}
	return []string{name + "-namespace", name + "-pod", name + "-pod-uid", name + "-node", name + "-match"}
}

// isAWSHeader reports whether line is a header line, as files delivered
// to object storage begin: field names only, among them an address field.
func isAWSHeader(line []byte) bool {
	found := false
	for f := range bytes.FieldsSeq(line) {
		for _, c := range f {
			if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-') {
				return false
			}
		}
		found = found || slices.Contains(awsAddressFields, string(f))
	}
	return found
}

// aws enriches VPC Flow Logs text records. A header line (there is one
// per delivered file, and concatenated files repeat it) sets the field
// order of the records after it. Text output is written by workers over
// blocks of records (awsParallel).
func (e *Enricher) aws(in *lines) error {
	names := e.opts.Fields
	if names == nil {
		names = defaultAWSFields
	}
	f, err := newAWSFormat(names, e.cl != nil)
	if err != nil {
		return err
	}
	if e.opts.Output == "" && e.workers > 1 {
		return e.awsParallel(in, f)
	}
	var pos [][2]int
	for {
		line, raw, ok, err := in.next()
		if err != nil || !ok {
			return err
		}
		if isHeaderLine(line) {
			if f, err = newAWSFormat(strings.Fields(string(line)), e.cl != nil); err != nil {
				return fmt.Errorf("%s:%d: %w", in.name, in.n, err)
			}
			continue
		}
		e.awsHeader(f)
		pos = e.awsLine(in, f, line, raw, pos)
	}
}

// isHeaderLine reports whether line is an aws-vpc header line. Records of
// the default format begin with a digit (the version): most lines are
// told apart by their first byte.
func isHeaderLine(line []byte) bool {
	return len(line) > 0 && line[0] >= 'a' && line[0] <= 'z' && isAWSHeader(line)
}

// awsLine enriches and writes one record of format f; pos is reused for
// its fields' bounds.
func (e *Enricher) awsLine(in *lines, f *awsFormat, line, raw []byte, pos [][2]int) [][2]int {
	pos = splitSpaces(line, pos[:0])
	if len(pos) != len(f.names) {
		e.unparsed(in, raw, fmt.Sprintf("%d fields, the format has %d (%s)", len(pos), len(f.names), f.names[0]+" … "+f.names[len(f.names)-1]))
		return pos
	}
	r := awsRecord{line, pos}
	answers := e.answers(len(f.addrs))
	if !e.awsAnswers(f, &r, answers) {
		e.unparsed(in, raw, fmt.Sprintf("start %q or end %q is not Unix seconds", r.field(f.start), r.field(f.end)))
		return pos
	}
	e.record(answers)
	e.writeAWS(f, &r, answers)
	return pos
}

// awsAnswers looks up every address field of a record; false when its
// time cannot be read.
func (e *Enricher) awsAnswers(f *awsFormat, r *awsRecord, answers []Answer) bool {
	skip := f.status >= 0 && (bytes.Equal(r.field(f.status), []byte("NODATA")) || bytes.Equal(r.field(f.status), []byte("SKIPDATA")))
	var from, to int64
	if !skip {
		var ok1, ok2 bool
		from, ok1 = unixSeconds(r.field(f.start))
		to, ok2 = unixSeconds(r.field(f.end))
		if !ok1 || !ok2 {
			if !isDash(r.field(f.start)) || !isDash(r.field(f.end)) {
				return false
			}
			skip = true
		}
	}
	for j, i := range f.addrs {
		if skip {
			answers[j].Match, answers[j].Holders = Skipped, answers[j].Holders[:0]
			continue
		}
		e.lookup(r.field(i), from, max(from, to), &answers[j])
	}
	return true
}

// awsHeader writes the header line of f's columns before the first line
// in f's order, in text output.
func (e *Enricher) awsHeader(f *awsFormat) {
	if e.opts.Output == "" && !f.headerWritten {
		e.out.Write(f.header)
		e.out.WriteByte('\n')
		f.headerWritten = true
	}
}

// awsRecord is a record's line and the bounds of its fields.
type awsRecord struct {
	line []byte
	pos  [][2]int
}

func (r *awsRecord) field(i int) []byte { return r.line[r.pos[i][0]:r.pos[i][1]] }

func (e *Enricher) writeAWS(f *awsFormat, r *awsRecord, answers []Answer) {
	switch e.opts.Output {
	case FormatJSONL, FormatCSV:
		values := make([]string, len(f.names))
		for i := range f.names {
			values[i] = string(r.field(i))
		}
		addrNames := make([]string, len(f.addrs))
		for j, i := range f.addrs {
			addrNames[j] = f.names[i]
		}
		e.writeTable(f.names, values, addrNames, answers)
		return
	}
	e.out.Write(r.line)
	for i := range answers {
		e.writeColumns(' ', &answers[i])
	}
	e.out.WriteByte('\n')
}

func isDash(b []byte) bool { return len(b) == 1 && b[0] == '-' }

// splitSpaces returns the [start, end) of each field; fields are
// separated by one space or more.
func splitSpaces(line []byte, pos [][2]int) [][2]int {
	for start := 0; start < len(line); {
		end := bytes.IndexByte(line[start:], ' ')
		if end < 0 {
			end = len(line) - start
		}
		if end > 0 {
			pos = append(pos, [2]int{start, start + end})
		}
		start += end + 1
	}
	return pos
}

// unixSeconds reads Unix seconds as nanoseconds, without allocating.
func unixSeconds(b []byte) (int64, bool) {
	if len(b) == 0 || len(b) > 11 {
		return 0, false
	}
	var n int64
	for _, c := range b {
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + int64(c-'0')
	}
	return n * 1e9, true
}
