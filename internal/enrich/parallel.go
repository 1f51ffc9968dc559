package enrich

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"sync/atomic"
)

// awsJob is a block of aws-vpc records of one format, and what a worker
// made of it.
type awsJob struct {
	f     *awsFormat
	blk   *block // data's
	data  []byte
	first int64 // the number of its first line
	done  chan struct{}

	out   *bytes.Buffer
	warn  bytes.Buffer
	stats Stats
}

// block is a buffer of input lines, shared by the jobs cut from it (one
// a format), and reused once the last is written: the records are
// streamed without garbage, so the memory they take does not grow with
// their number.
type block struct {
	buf  []byte
	refs atomic.Int32
}

var (
	blocks  sync.Pool // of *block
	outputs sync.Pool // of *bytes.Buffer
)

// newBlock returns a block with room for n bytes, one reference taken.
func newBlock(n int) *block {
	b, _ := blocks.Get().(*block)
	if b == nil || cap(b.buf) < n {
		b = &block{buf: make([]byte, 0, n)}
	}
	b.buf = b.buf[:0]
	b.refs.Store(1)
	return b
}

// release lets go of a reference to b, reused once none is left.
func (b *block) release() {
	if b.refs.Add(-1) == 0 {
		blocks.Put(b)
	}
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
			w := &Enricher{ix: e.ix, opts: e.opts, out: bufio.NewWriterSize(nil, 64<<10)}
			if e.cl != nil {
				w.cl = e.cl.clone()
			}
			for j := range jobs {
				w.enrichJob(in.name, j)
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
		blk := newBlock(len(carry) + max(e.block, len(carry)))
		buf := append(blk.buf, carry...)
		n, err := io.ReadFull(in.r, buf[len(carry):cap(buf)])
		buf = buf[:len(carry)+n]
		end := errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF)
		if err != nil && !end {
			return fmt.Errorf("%s:%d: %w", in.name, in.n+1, err)
		}
		whole := len(buf)
		if !end {
			if whole = bytes.LastIndexByte(buf, '\n') + 1; whole == 0 {
				carry = append(carry[:0], buf...) // a line longer than a block: read on
				blk.release()
				continue
			}
		}
		carry = append(carry[:0], buf[whole:]...)
		blk.buf = buf
		var cerr error
		f, cerr = e.split(in, f, blk, whole, send)
		blk.release()
		if cerr != nil {
			return cerr
		}
		if end {
			return nil
		}
	}
}

// split sends the lines of block, in parts between its header lines, and
// returns the format in force after it.
func (e *Enricher) split(in *lines, f *awsFormat, blk *block, whole int, send func(*awsJob)) (*awsFormat, error) {
	block := blk.buf[:whole]
	from, first := 0, in.n+1
	flush := func(to int) {
		if to > from {
			blk.refs.Add(1)
			send(&awsJob{f: f, blk: blk, data: block[from:to], first: first, done: make(chan struct{})})
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
			nf, err := newAWSFormat(strings.Fields(string(line)), e.cl != nil)
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

// enrichJob enriches j's records into j's own output; w is a worker's,
// reused from job to job.
func (w *Enricher) enrichJob(name string, j *awsJob) {
	if j.out, _ = outputs.Get().(*bytes.Buffer); j.out == nil {
		j.out = new(bytes.Buffer)
	}
	w.out.Reset(j.out)
	w.warn, w.Stats, w.warned = &j.warn, Stats{}, 0
	in := &lines{data: j.data, name: name, n: j.first - 1}
	for {
		line, raw, ok, _ := in.next()
		if !ok {
			break
		}
		w.pos = w.awsLine(in, j.f, line, raw, w.pos)
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
	j.out.Reset()
	outputs.Put(j.out)
	j.blk.release()
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
