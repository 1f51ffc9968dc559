package enrich

import (
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"slices"
)

// csv enriches CSV records: a header row names the columns, of which
// --time-field (and --end-field) and --address-fields are read.
func (e *Enricher) csv(in *lines) error {
	if e.opts.TimeField == "" || len(e.opts.AddressFields) == 0 {
		return fmt.Errorf("%s: csv records need --time-field and --address-fields to name the columns of their time and addresses", in.name)
	}
	src := &rawTap{r: in.r}
	r := csv.NewReader(src)
	r.FieldsPerRecord = -1
	r.ReuseRecord = true
	header, err := r.Read()
	if err != nil {
		return fmt.Errorf("%s: reading the header row: %w", in.name, err)
	}
	header = slices.Clone(header)
	src.take(r.InputOffset())
	cols, err := csvColumns(header, e.opts)
	if err != nil {
		return fmt.Errorf("%s: %w", in.name, err)
	}
	addrNames := e.opts.AddressFields
	for line := int64(2); ; {
		rec, err := r.Read()
		raw := src.take(r.InputOffset())
		in.n = line
		line += int64(countNewlines(raw))
		if errors.Is(err, io.EOF) {
			return nil
		}
		raw = trimNewline(raw)
		if err != nil || len(rec) != len(header) {
			why := fmt.Sprintf("%d fields, the header has %d", len(rec), len(header))
			if err != nil {
				why = err.Error()
			}
			e.unparsed(in, raw, why)
			continue
		}
		from, err := parseTime(rec[cols.time])
		to := from
		if err == nil && cols.end >= 0 {
			to, err = parseTime(rec[cols.end])
		}
		if err != nil {
			e.unparsed(in, raw, err.Error())
			continue
		}
		answers := e.answers(len(cols.addrs))
		for i, c := range cols.addrs {
			e.lookup([]byte(rec[c]), from, max(from, to), &answers[i])
		}
		e.record(answers)
		e.writeTable(header, rec, addrNames, answers)
	}
}

type csvCols struct {
	time, end int
	addrs     []int
}

func csvColumns(header []string, o Options) (csvCols, error) {
	c := csvCols{time: slices.Index(header, o.TimeField), end: -1}
	if c.time < 0 {
		return c, fmt.Errorf("the header row has no column %q (--time-field); it has %q", o.TimeField, header)
	}
	if o.EndField != "" {
		if c.end = slices.Index(header, o.EndField); c.end < 0 {
			return c, fmt.Errorf("the header row has no column %q (--end-field); it has %q", o.EndField, header)
		}
	}
	for _, a := range o.AddressFields {
		i := slices.Index(header, a)
		if i < 0 {
			return c, fmt.Errorf("the header row has no column %q (--address-fields); it has %q", a, header)
		}
		c.addrs = append(c.addrs, i)
	}
	return c, nil
}

// rawTap keeps the bytes a csv.Reader read, so that a record it cannot
// parse is passed through as it was: take returns them up to an input
// offset.
type rawTap struct {
	r    io.Reader
	buf  []byte
	base int64 // input offset of buf[0]
}

func (t *rawTap) Read(p []byte) (int, error) {
	n, err := t.r.Read(p)
	t.buf = append(t.buf, p[:n]...)
	return n, err
}

func (t *rawTap) take(offset int64) []byte {
	n := int(offset - t.base)
	raw := slices.Clone(t.buf[:n])
	t.buf = append(t.buf[:0], t.buf[n:]...)
	t.base = offset
	return raw
}

func countNewlines(b []byte) int {
	n := 0
	for _, c := range b {
		if c == '\n' {
			n++
		}
	}
	return n
}

func trimNewline(b []byte) []byte {
	if len(b) > 0 && b[len(b)-1] == '\n' {
		b = b[:len(b)-1]
	}
	return b
}
