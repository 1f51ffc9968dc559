package enrich

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
)

// awsJob is a block of aws-vpc records of one format, and what a worker
// made of it.
type awsJob struct {
	f     *awsFormat
	data  []byte
	first int64 // the number of its first line
	done  chan struct{}

	out   bytes.Buffer
	warn  bytes.Buffer
	stats Stats
}

// awsParallel enriches aws-vpc records in text output with e.workers
// goroutines: the input is cut into blocks of whole lines, split at header
// lines (a block has one format), enriched at once, and written in input
// order. Enriching a record is what costs (the lookups, the columns); a
// record depends on no other, but on the header before it.
func (e *Enricher) awsParallel(in *lines, f *awsFormat) error {
	jobs := make(chan *awsJob, e.workers)
	order := make(chan *awsJob, 2*e.workers)
	var wg sync.WaitGroup
	for range e.workers {
		wg.Go(func() {
			for j := range jobs {
				e.enrichJob(in.name, j)
				close(j.done)
			}
		})
	}
	var readErr error
	go func() {
		defer close(jobs)
		defer close(order)
		readErr = e.cut(in, f, func(j *awsJob) {
			order <- j
			jobs <- j
		})
	}()
	for j := range order {
		<-j.done
		e.merge(j)
	}
	wg.Wait()
	return readErr // read after order was closed
}

// cut reads in's blocks of whole lines, splits each at its header lines,
// and sends each part with its format.
func (e *Enricher) cut(in *lines, f *awsFormat, send func(*awsJob)) error {
	var carry []byte
	for {
		// A line longer than a block is carried into a buffer twice as
		// large each time: read once, copied a few times.
		buf := make([]byte, len(carry), len(carry)+max(e.block, len(carry)))
		copy(buf, carry)
		n, err := io.ReadFull(in.r, buf[len(carry):cap(buf)])
		buf = buf[:len(carry)+n]
		end := errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF)
		if err != nil && !end {
			return fmt.Errorf("%s:%d: %w", in.name, in.n+1, err)
		}
		whole := len(buf)
		if !end {
			if whole = bytes.LastIndexByte(buf, '\n') + 1; whole == 0 {
				carry = buf // a line longer than a block: read on
				continue
			}
		}
		carry = append([]byte(nil), buf[whole:]...)
		var cerr error
		if f, cerr = e.split(in, f, buf[:whole], send); cerr != nil {
			return cerr
		}
		if end {
			return nil
		}
	}
}

// split sends the lines of block, in parts between its header lines, and
// returns the format in force after it.
func (e *Enricher) split(in *lines, f *awsFormat, block []byte, send func(*awsJob)) (*awsFormat, error) {
	from, first := 0, in.n+1
	flush := func(to int) {
		if to > from {
			send(&awsJob{f: f, data: block[from:to], first: first, done: make(chan struct{})})
		}
	}
	for i := 0; i < len(block); {
		next := len(block)
		if j := bytes.IndexByte(block[i:], '\n'); j >= 0 {
			next = i + j + 1
		}
		in.n++
		line := bytes.TrimSuffix(bytes.TrimSuffix(block[i:next], []byte{'\n'}), []byte{'\r'})
		if isHeaderLine(line) {
			nf, err := newAWSFormat(strings.Fields(string(line)))
			if err != nil {
				flush(i)
				return nil, fmt.Errorf("%s:%d: %w", in.name, in.n, err)
			}
			flush(i)
			f, from, first = nf, next, in.n+1
		}
		i = next
	}
	flush(len(block))
	return f, nil
}

// enrichJob enriches j's records into its own output, as e would.
func (e *Enricher) enrichJob(name string, j *awsJob) {
	w := &Enricher{ix: e.ix, opts: e.opts, out: bufio.NewWriterSize(&j.out, 64<<10), warn: &j.warn}
	in := &lines{data: j.data, name: name, n: j.first - 1}
	var pos [][2]int
	for {
		line, raw, ok, _ := in.next()
		if !ok {
			break
		}
		pos = w.awsLine(in, j.f, line, raw, pos)
	}
	_ = w.out.Flush() // into a bytes.Buffer: no error
	j.stats = w.Stats
}

// merge writes a finished job: the header of its format before its first
// line, its records, and the first warnings up to maxWarnings; and adds
// its counts.
func (e *Enricher) merge(j *awsJob) {
	e.awsHeader(j.f)
	e.out.Write(j.out.Bytes())
	warnings := j.warn.Bytes()
	for e.warned < maxWarnings && len(warnings) > 0 {
		line := warnings
		if i := bytes.IndexByte(warnings, '\n'); i >= 0 {
			line, warnings = warnings[:i+1], warnings[i+1:]
		} else {
			warnings = nil
		}
		_, _ = e.warn.Write(line)
		e.warned++
	}
	before := e.Stats.Records
	e.Stats.Records += j.stats.Records
	e.Stats.Addresses += j.stats.Addresses
	e.Stats.Unparsed += j.stats.Unparsed
	for m := range e.Stats.ByMatch {
		e.Stats.ByMatch[m] += j.stats.ByMatch[m]
	}
	if e.Progress != nil && before/progressEvery != e.Stats.Records/progressEvery {
		e.Progress(e.Stats)
	}
}
