package enrich

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"runtime"
	"time"
)

// Formats of the input, and of -o.
const (
	FormatAWS   = "aws-vpc"
	FormatGCP   = "gcp-vpc"
	FormatJSONL = "jsonl"
	FormatCSV   = "csv"
)

// Options say how to read records and how to write them.
type Options struct {
	// Format is the input's; "" to recognize it from the first line.
	Format string
	// Output is jsonl or csv to convert; "" for the input's own shape.
	Output string
	// Fields is the field order of aws-vpc records without a header line.
	Fields []string
	// TimeField, EndField and AddressFields locate the time and the
	// addresses of jsonl and csv records: dotted paths into a JSON
	// object, column names of a CSV header.
	TimeField, EndField string
	AddressFields       []string
	// Skew widens each record's window on both sides: the flow's clock
	// and the controller's are not the same.
	Skew time.Duration
}

// Stats count what a run did, for its summary.
type Stats struct {
	Records, Addresses, Unparsed int64
	ByMatch                      [numMatches]int64
}

// maxWarnings bounds the lines named on standard error: a wrong --format
// would otherwise print one per record.
const maxWarnings = 100

// Enricher streams records through an Index.
type Enricher struct {
	ix *Index
	// cl, when set, answers instead of ix, from several clusters; the
	// columns then name each holder's cluster.
	cl    *Clusters
	opts  Options
	out   *bufio.Writer
	warn  io.Writer
	Stats Stats
	// Progress, when set, is called every progressEvery records.
	Progress func(Stats)

	warned int
	ans    []Answer
	// workers enrich blocks of aws-vpc records at once (awsParallel);
	// block is the size of a block; pos is a worker's fields' bounds.
	workers, block int
	pos            [][2]int
	csvNames       []string // the header last written, in CSV
}

const progressEvery = 1 << 16

// NewEnricher writes enriched records to out, and the records it could not
// read, by line, to warn.
func NewEnricher(ix *Index, opts Options, out, warn io.Writer) *Enricher {
	return &Enricher{ix: ix, opts: opts, out: bufio.NewWriterSize(out, 256<<10), warn: warn,
		workers: runtime.GOMAXPROCS(0), block: 128 << 10}
}

// UseClusters makes e answer from several clusters' histories, with a
// cluster column for each address field.
func (e *Enricher) UseClusters(c *Clusters) { e.cl, e.ix = c, nil }

// Flush writes what is buffered.
func (e *Enricher) Flush() error { return e.out.Flush() }

// Unnamed is how many unparsed records were not named on standard error.
func (e *Enricher) Unnamed() int64 { return e.Stats.Unparsed - int64(e.warned) }

// Stream enriches the records of one input, name for messages; a gzip
// stream is read as what it holds. An error means the input could not be
// read, or the options do not fit it; a record that cannot be parsed is
// not one.
func (e *Enricher) Stream(name string, r io.Reader) error {
	br := bufio.NewReaderSize(r, 256<<10)
	if magic, _ := br.Peek(2); bytes.Equal(magic, []byte{0x1f, 0x8b}) {
		zr, err := gzip.NewReader(br)
		if err != nil {
			return fmt.Errorf("%s: reading gzip: %w", name, err)
		}
		defer zr.Close()
		br = bufio.NewReaderSize(zr, 256<<10)
	}
	format := e.opts.Format
	if format == "" {
		var err error
		if format, err = e.detect(name, br); err != nil {
			return err
		}
	}
	in := &lines{r: br, name: name}
	var err error
	switch format {
	case FormatAWS:
		err = e.aws(in)
	case FormatGCP, FormatJSONL:
		err = e.jsonLines(in, format)
	case FormatCSV:
		err = e.csv(in)
	default:
		return fmt.Errorf("--format %q is not a format: use aws-vpc, gcp-vpc, jsonl or csv", format)
	}
	if err != nil {
		return err
	}
	return e.out.Flush()
}

// detect recognizes the format from the first line that is not empty.
func (e *Enricher) detect(name string, br *bufio.Reader) (string, error) {
	first, err := br.Peek(br.Size())
	if err != nil && !errors.Is(err, io.EOF) && !errors.Is(err, bufio.ErrBufferFull) {
		return "", fmt.Errorf("%s: %w", name, err)
	}
	first = bytes.TrimLeft(first, " \t\r\n")
	if i := bytes.IndexByte(first, '\n'); i >= 0 {
		first = first[:i]
	}
	switch {
	case len(first) == 0:
		return FormatAWS, nil // empty: nothing to enrich either way
	case first[0] == '{' && bytes.Contains(first, []byte(`"jsonPayload"`)) && bytes.Contains(first, []byte(`"connection"`)):
		return FormatGCP, nil
	case first[0] == '{':
		return FormatJSONL, nil
	case isAWSHeader(first) || e.opts.Fields != nil || len(bytes.Fields(first)) == len(defaultAWSFields) && !bytes.ContainsRune(first, ','):
		return FormatAWS, nil
	case bytes.ContainsRune(first, ','):
		return FormatCSV, nil
	}
	return "", fmt.Errorf("%s: cannot tell the format from its first line: give --format aws-vpc, gcp-vpc, jsonl or csv", name)
}

// record counts a record and its answers, and reports progress.
func (e *Enricher) record(answers []Answer) {
	e.Stats.Records++
	for i := range answers {
		e.Stats.ByMatch[answers[i].Match]++
		if answers[i].Match != Skipped {
			e.Stats.Addresses++
		}
	}
	if e.Progress != nil && e.Stats.Records%progressEvery == 0 {
		e.Progress(e.Stats)
	}
}

// unparsed passes raw through untouched and names its line.
func (e *Enricher) unparsed(in *lines, raw []byte, why string) {
	e.Stats.Unparsed++
	if e.warned < maxWarnings {
		e.warned++
		fmt.Fprintf(e.warn, "%s:%d: passed through unparsed: %s\n", in.name, in.n, why)
	}
	e.out.Write(raw)
	e.out.WriteByte('\n')
}

// answers returns n reusable answers.
func (e *Enricher) answers(n int) []Answer {
	for len(e.ans) < n {
		e.ans = append(e.ans, Answer{})
	}
	return e.ans[:n]
}

// lookup answers address over [from, to] widened by the skew; "-" and ""
// are no address.
func (e *Enricher) lookup(address []byte, from, to int64, a *Answer) {
	if len(address) == 0 || len(address) == 1 && address[0] == '-' {
		a.Match, a.Holders, a.Current = Skipped, a.Holders[:0], ""
		return
	}
	if e.cl != nil {
		e.cl.Lookup(address, from, to, e.opts.Skew.Nanoseconds(), a)
		return
	}
	e.ix.Lookup(address, from, to, e.opts.Skew.Nanoseconds(), a)
}

// lines reads an input line by line, numbering them: from r, or from data
// when r is nil (a block of lines a worker enriches).
type lines struct {
	r    *bufio.Reader
	data []byte
	name string
	n    int64
	long []byte
}

// next returns the next line without its line ending (raw keeps a \r),
// and false at the end of the input.
func (l *lines) next() (line, raw []byte, ok bool, err error) {
	if l.r == nil {
		if len(l.data) == 0 {
			return nil, nil, false, nil
		}
		b := l.data
		if i := bytes.IndexByte(b, '\n'); i >= 0 {
			b, l.data = b[:i], b[i+1:]
		} else {
			l.data = nil
		}
		l.n++
		return bytes.TrimSuffix(b, []byte{'\r'}), b, true, nil
	}
	b, err := l.r.ReadSlice('\n')
	if errors.Is(err, bufio.ErrBufferFull) {
		l.long = append(l.long[:0], b...)
		for errors.Is(err, bufio.ErrBufferFull) {
			b, err = l.r.ReadSlice('\n')
			l.long = append(l.long, b...)
		}
		b = l.long
	}
	if err != nil && !errors.Is(err, io.EOF) {
		return nil, nil, false, fmt.Errorf("%s:%d: %w", l.name, l.n+1, err)
	}
	if len(b) == 0 {
		return nil, nil, false, nil
	}
	l.n++
	raw = bytes.TrimSuffix(b, []byte{'\n'})
	return bytes.TrimSuffix(raw, []byte{'\r'}), raw, true, nil
}
