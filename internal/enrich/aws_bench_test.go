package enrich

import (
	"bytes"
	"net/netip"
	"strconv"
	"testing"
)

// The aws-vpc hot path reads fields, addresses and times by hand; these
// two benchmarks hold it against the library's way of doing the same
// (docs/history.md, "What enrich costs").
var benchLine = []byte("2 123456789010 eni-0000000001d2a026a 10.244.25.115 10.244.17.47 22784 443 6 100 27472 1795716075 1795716122 ACCEPT OK")

func BenchmarkAWSFieldsHandWritten(b *testing.B) {
	var pos [][2]int
	for b.Loop() {
		pos = splitSpaces(benchLine, pos[:0])
		r := awsRecord{benchLine, pos}
		k1, ok1 := parseIPv4(r.field(3))
		k2, ok2 := parseIPv4(r.field(4))
		s, ok3 := unixSeconds(r.field(10))
		e, ok4 := unixSeconds(r.field(11))
		if !ok1 || !ok2 || !ok3 || !ok4 || k1 == k2 || s > e {
			b.Fatal("parse")
		}
	}
}

func BenchmarkAWSFieldsLibrary(b *testing.B) {
	for b.Loop() {
		f := bytes.Fields(benchLine)
		a1, err1 := netip.ParseAddr(string(f[3]))
		a2, err2 := netip.ParseAddr(string(f[4]))
		s, err3 := strconv.ParseInt(string(f[10]), 10, 64)
		e, err4 := strconv.ParseInt(string(f[11]), 10, 64)
		if err1 != nil || err2 != nil || err3 != nil || err4 != nil || a1 == a2 || s > e {
			b.Fatal("parse")
		}
	}
}
