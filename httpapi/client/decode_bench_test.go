package client

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
)

// BenchmarkDecodePage splits a JSON drain page of 10,000 TSBS cpu rows
// (12 cells each, as the server writes it) into rows of cells: the cost
// a consumer (and `ingestd bench`'s drain) pays per page.
func BenchmarkDecodePage(b *testing.B) {
	var sb strings.Builder
	sb.WriteString(`{"table":"cpu","epoch":1,"after":0,"next":10000,"seq":20000,"watermark":20000,"more":true,"columns":["time","hostname","region","usage_user","usage_system","usage_idle","usage_nice","usage_iowait","usage_irq","usage_softirq","usage_steal","x_seq"],"rows":[`)
	for i := range 10000 {
		if i > 0 {
			sb.WriteByte(',')
		}
		fmt.Fprintf(&sb, `["2026-01-01T00:00:%02dZ","host_%d","eu-west-1",58.1,2.5,24.3,61.2,22.1,63.4,6.1,44.9,%d]`, i%60, i%100, i+1)
	}
	sb.WriteString("]}\n")
	benchDecodePage(b, []byte(sb.String()), 12)
}

// BenchmarkDecodePageTSBSCPU decodes a JSON page shaped as a drain of
// TSBS's cpu table is: 10,000 rows of time, 10 tags (short strings), 10
// small integers and x_seq, 22 cells a row (most cells of a real page
// are short strings and integers, not BenchmarkDecodePage's floats).
func BenchmarkDecodePageTSBSCPU(b *testing.B) {
	var sb strings.Builder
	sb.WriteString(`{"table":"cpu","epoch":1,"after":0,"next":10000,"seq":43200,"watermark":43200,"more":true,"columns":["time","arch","datacenter","hostname","os","rack","region","service","service_environment","service_version","team","usage_user","usage_system","usage_idle","usage_nice","usage_iowait","usage_irq","usage_softirq","usage_steal","usage_guest","usage_guest_nice","x_seq"],"rows":[`)
	for i := range 10000 {
		if i > 0 {
			sb.WriteByte(',')
		}
		fmt.Fprintf(&sb, `["2026-01-01T00:%02d:%02dZ","x86","sa-east-1c","host_%d","Ubuntu15.10","%d","sa-east-1","%d","staging","0","LON",%d,6,60,%d,4,38,81,38,38,64,%d]`,
			i/600%60, i/10%60, i%10, i%100, i%20, i%100, (i*7)%100, i+1)
	}
	sb.WriteString("]}\n")
	benchDecodePage(b, []byte(sb.String()), 22)
}

// benchDecodePage decodes page, 10,000 rows of cells cells each, per op.
func benchDecodePage(b *testing.B, page []byte, cells int) {
	c := &Client{}
	var pg Page
	b.SetBytes(int64(len(page)))
	b.ReportAllocs()
	for b.Loop() {
		var env struct {
			Next    uint64          `json:"next"`
			Columns []string        `json:"columns"`
			Rows    json.RawMessage `json:"rows"`
		}
		pg.Rows = pg.Rows[:0]
		if err := c.decodePage("GET /drain", page, &env, &env.Rows, &pg.Rows, &pg.cells); err != nil || len(pg.Rows) != 10000 || len(pg.Rows[9999]) != cells {
			b.Fatal(err, len(pg.Rows))
		}
	}
}
