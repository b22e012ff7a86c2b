package httpapi

import (
	"math"
	"strconv"
	"testing"

	"github.com/ingestd/ingestd/feed"
)

// benchRows returns n drain rows shaped like TSBS devops rows: time, 10
// tags, 10 integer fields (cpu) or 6 integers and 3 floats (mem), x_seq.
func benchRows(n int, floats bool) [][]feed.Value {
	tags := []string{"x64", "eu-central-1a", "", "Ubuntu16.10", "30", "eu-central-1", "19", "staging", "1", "NYC"}
	rows := make([][]feed.Value, n)
	ts := int64(1767225600000000000)
	for i := range rows {
		r := make([]feed.Value, 0, 22)
		r = append(r, feed.Value{Kind: feed.KindTime, Num: uint64(ts + int64(i/100)*10e9)})
		for j, t := range tags {
			if j == 2 {
				t = "host_" + strconv.Itoa(i%100)
			}
			r = append(r, feed.Value{Kind: feed.KindTag, Str: t})
		}
		for j := range 10 {
			switch {
			case floats && j >= 7:
				r = append(r, feed.Value{Kind: feed.KindFloat, Num: math.Float64bits(float64(i%1000)/7 + float64(j))})
			case floats && j == 6:
				r = append(r, feed.Value{}) // absent
			default:
				r = append(r, feed.Value{Kind: feed.KindInt, Num: uint64((i*31 + j*7) % 100)})
			}
		}
		r = append(r, feed.Value{Kind: feed.KindSeq, Num: uint64(i + 1)})
		rows[i] = r
	}
	return rows
}

// BenchmarkEncodeRows renders a JSON drain page of 10,000 rows (the
// rows array, as drain builds it) per op. Bytes are the page's.
func BenchmarkEncodeRows(b *testing.B) {
	for _, bc := range []struct {
		name     string
		floats   bool
		counters bool // integers of 10 and 11 digits, x_seq above 10^6 (TSBS diskio, net: byte and operation counters)
		tf       timeFormat
	}{{"cpu/rfc3339", false, false, timeRFC3339}, {"mem/rfc3339", true, false, timeRFC3339}, {"cpu/ns", false, false, timeFormat(1)},
		{"counters/rfc3339", false, true, timeRFC3339}} {
		b.Run(bc.name, func(b *testing.B) {
			rows := benchRows(10_000, bc.floats)
			for i, r := range rows {
				for j := range r {
					switch {
					case !bc.counters:
					case r[j].Kind == feed.KindInt:
						r[j].Num = 8_589_934_592 + uint64(i)*7_919*uint64(j)
					case r[j].Kind == feed.KindSeq:
						r[j].Num += 1_000_000
					}
				}
			}
			enc := encoder{timeFormat: bc.tf, buf: make([]byte, 0, 64<<10)}
			page := func() {
				enc.buf = enc.buf[:0]
				for i, r := range rows {
					if i > 0 {
						enc.buf = append(enc.buf, ',')
					}
					enc.row(r)
				}
			}
			page()
			b.SetBytes(int64(len(enc.buf)))
			b.ReportAllocs()
			for b.Loop() {
				// As each drain request starts: a fresh encoder with a
				// recycled page buffer.
				enc = encoder{timeFormat: bc.tf, buf: enc.buf[:0]}
				page()
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/10_000, "ns/row")
		})
	}
}

// BenchmarkEncodeLines renders a line-protocol drain page of 10,000
// TSBS cpu rows per op (tags in key order, as line writes them).
func BenchmarkEncodeLines(b *testing.B) {
	cols := []feed.Column{{Name: "time"}}
	for _, n := range []string{"arch", "datacenter", "hostname", "os", "rack", "region", "service", "service_environment", "service_version", "team"} {
		cols = append(cols, feed.Column{Name: n})
	}
	for _, n := range []string{"usage_user", "usage_system", "usage_idle", "usage_nice", "usage_iowait", "usage_irq", "usage_softirq", "usage_steal", "usage_guest", "usage_guest_nice"} {
		cols = append(cols, feed.Column{Name: n})
	}
	cols = append(cols, feed.Column{Name: "x_seq"})
	rows := benchRows(10_000, false)
	enc := encoder{buf: make([]byte, 0, 64<<10)}
	page := func() {
		enc.buf = enc.buf[:0]
		for _, r := range rows {
			if !enc.line("cpu", cols, r) {
				b.Fatal("no field")
			}
		}
	}
	page()
	b.SetBytes(int64(len(enc.buf)))
	b.ReportAllocs()
	for b.Loop() {
		enc = encoder{buf: enc.buf[:0]}
		page()
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/10_000, "ns/row")
}
