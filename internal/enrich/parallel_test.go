package enrich

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"
)

// streamWith enriches input with workers goroutines over blocks of block
// bytes.
func streamWith(t testing.TB, opts Options, input []byte, workers, block int) (out, warn string, st Stats, err error) {
	var o, w bytes.Buffer
	opts.Skew = time.Second
	e := NewEnricher(fixture(t), opts, &o, &w)
	e.workers, e.block = workers, block
	var progress []int64
	e.Progress = func(s Stats) { progress = append(progress, s.Records) }
	err = e.Stream("in", bytes.NewReader(input))
	return o.String(), w.String(), e.Stats, err
}

// sameInParallel checks that workers over blocks of block bytes write what
// one goroutine writes: the records in order, the same warnings, counts
// and error.
func sameInParallel(t testing.TB, opts Options, input []byte, block int) error {
	out1, warn1, st1, err1 := streamWith(t, opts, input, 1, block)
	out3, warn3, st3, err3 := streamWith(t, opts, input, 3, block)
	switch {
	case fmt.Sprint(err1) != fmt.Sprint(err3):
		return fmt.Errorf("blocks of %d: error %v, one goroutine's %v", block, err3, err1)
	case out1 != out3:
		return fmt.Errorf("blocks of %d: output\n%q\none goroutine's\n%q", block, out3, out1)
	case warn1 != warn3:
		return fmt.Errorf("blocks of %d: warnings\n%q\none goroutine's\n%q", block, warn3, warn1)
	case st1 != st3:
		return fmt.Errorf("blocks of %d: stats %+v, one goroutine's %+v", block, st3, st1)
	}
	return nil
}

// TestAWSInParallelKeepsOrder enriches a log of header lines, custom
// formats, unparsed records (more than maxWarnings), CRLF endings and a
// last line without one, in blocks from one byte up.
func TestAWSInParallelKeepsOrder(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 7))
	var b strings.Builder
	for i := range 1500 {
		switch rng.IntN(20) {
		case 0:
			b.WriteString(awsHeader + "\n")
		case 1:
			b.WriteString("start srcaddr dstaddr\r\n")
		case 2:
			b.WriteString("not a record\n")
		case 3:
			b.WriteString("\n")
		default:
			if strings.HasPrefix(lastHeader(b.String()), "start") {
				fmt.Fprintf(&b, "%d 10.0.0.1 fd00::7\n", unix(rng.IntN(200)))
				continue
			}
			fmt.Fprintf(&b, "2 1 eni-%d 10.0.0.1 fd00::7 1 2 6 1 1 %d %d ACCEPT OK\n", i, unix(rng.IntN(200)), unix(rng.IntN(200)))
		}
	}
	b.WriteString("2 1 eni-last 10.0.0.1 - - - - - - - - NODATA")
	input := []byte(b.String())
	for _, block := range []int{1, 7, 64, 300, 4096, 1 << 20} {
		if err := sameInParallel(t, Options{Format: FormatAWS}, input, block); err != nil {
			t.Fatal(err)
		}
	}
	out, warn, st, err := streamWith(t, Options{Format: FormatAWS}, input, 2, 100)
	if err != nil || st.Unparsed <= maxWarnings || strings.Count(warn, "\n") != maxWarnings || !strings.Contains(out, "eni-last") {
		t.Errorf("error %v, %d unparsed, %d warnings (want %d), last record in the output: %v", err, st.Unparsed, strings.Count(warn, "\n"), maxWarnings, strings.Contains(out, "eni-last"))
	}
}

func lastHeader(s string) string {
	i := max(strings.LastIndex(s, awsHeader), strings.LastIndex(s, "start srcaddr dstaddr"))
	if i < 0 {
		return ""
	}
	return s[i:]
}

// TestAWSInParallelStopsAtABadHeader: a header line without an address
// field ends the run with its line number, after the records before it.
func TestAWSInParallelStopsAtABadHeader(t *testing.T) {
	input := []byte(fmt.Sprintf("2 1 eni-1 10.0.0.1 fd00::7 1 2 6 1 1 %d %d ACCEPT OK\nsrcaddr dstaddr action\n2 1 eni-2\n", unix(10), unix(20)))
	if err := sameInParallel(t, Options{Format: FormatAWS}, input, 16); err != nil {
		t.Fatal(err)
	}
	_, _, _, err := streamWith(t, Options{Format: FormatAWS}, input, 2, 16)
	if err == nil || !strings.HasPrefix(err.Error(), "in:2: ") {
		t.Errorf("error %v, want one naming in:2", err)
	}
}
