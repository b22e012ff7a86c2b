package bench

import (
	"bytes"
	"fmt"
	"hash/maphash"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/klauspost/compress/gzip"

	"github.com/ingestd/ingestd/feed"
	"github.com/ingestd/ingestd/ilp"
)

// benchData is a load held in memory: newline-terminated ILP lines, with
// what every server should hold once it has stored them.
type benchData struct {
	name  string
	text  []byte
	offs  []int // offs[i] is where line i starts; offs[len] == len(text)
	stats map[string]*benchTableStat
	first int64 // lowest and highest timestamp (ns)
	last  int64
}

// benchTableStat is what one measurement (table) should hold.
type benchTableStat struct {
	lines   int64 // lines (ingestd fragments, InfluxDB points)
	samples int64 // field values (VictoriaMetrics samples)
}

func (d *benchData) lines() int { return len(d.offs) - 1 }

func (d *benchData) line(i int) []byte { return d.text[d.offs[i]:d.offs[i+1]] }

// tables returns the measurement names in order.
func (d *benchData) tables() []string {
	names := make([]string, 0, len(d.stats))
	for n := range d.stats {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

// loadBenchFile reads an ILP file (gzip when it ends in .gz).
func loadBenchFile(path string) (*benchData, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer func() { _ = f.Close() }()
	var r io.Reader = f
	if strings.HasSuffix(path, ".gz") {
		zr, err := gzip.NewReader(f)
		if err != nil {
			return nil, fmt.Errorf("read %s: %w", path, err)
		}
		defer func() { _ = zr.Close() }()
		r = zr
	}
	var buf bytes.Buffer
	if st, err := f.Stat(); err == nil {
		buf.Grow(int(st.Size()) * 11) // TSBS text compresses about tenfold
	}
	if _, err := buf.ReadFrom(r); err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	text := buf.Bytes()
	if len(text) > 0 && text[len(text)-1] != '\n' {
		text = append(text, '\n')
	}
	return indexBenchData(path, text)
}

// indexBenchData finds the line boundaries and parses every line with
// ingestd's parser to learn what each server should hold. Lines must be
// valid and free of raw newlines inside strings (as TSBS data is).
func indexBenchData(name string, text []byte) (*benchData, error) {
	d := &benchData{name: name, text: text, stats: map[string]*benchTableStat{}, first: math.MaxInt64, last: math.MinInt64}
	d.offs = make([]int, 0, bytes.Count(text, []byte{'\n'})+1)
	for pos := 0; pos < len(text); {
		d.offs = append(d.offs, pos)
		pos += bytes.IndexByte(text[pos:], '\n') + 1
	}
	d.offs = append(d.offs, len(text))
	p := ilp.NewParser(ilp.DefaultLimits())
	var b feed.Batch
	const chunk = 10_000
	for i := 0; i < d.lines(); i += chunk {
		j := min(i+chunk, d.lines())
		b.Points = b.Points[:0]
		perrs, _ := p.ParseAll(&b, text[d.offs[i]:d.offs[j]], i+1, ilp.Nanosecond, 0)
		if len(perrs) > 0 {
			return nil, fmt.Errorf("%s: %w", name, perrs[0])
		}
		if len(b.Points) != j-i {
			return nil, fmt.Errorf("%s: lines %d-%d hold %d points, want one per line (no blank lines or comments)", name, i+1, j, len(b.Points))
		}
		for k := range b.Points {
			pt := &b.Points[k]
			st := d.stats[pt.Table]
			if st == nil {
				st = &benchTableStat{}
				d.stats[pt.Table] = st
			}
			st.lines++
			st.samples += int64(len(pt.Fields))
			d.first, d.last = min(d.first, pt.Time), max(d.last, pt.Time)
		}
	}
	if d.lines() == 0 {
		return nil, fmt.Errorf("%s: no lines", name)
	}
	return d, nil
}

// seriesKey returns a line's measurement and tag set: the bytes before its
// first unescaped space.
func seriesKey(line []byte) []byte {
	for i := 0; i < len(line); i++ {
		switch line[i] {
		case '\\':
			i++
		case ' ':
			return line[:i]
		}
	}
	return line
}

// benchStream is the part of a load one writer sends, in order.
type benchStream struct {
	text  []byte
	lines int
}

// partition splits the load among n writers. By series, each writer owns
// a set of series (as each Telegraf agent sends its own host's metrics),
// balanced by line count, so every series arrives in time order. By batch,
// consecutive batches of batchLines go to the writers in turn, as TSBS's
// loader deals them out, so concurrent requests interleave in time.
func (d *benchData) partition(n int, bySeries bool, batchLines int) []benchStream {
	streams := make([]benchStream, n)
	if n == 1 {
		streams[0] = benchStream{text: d.text, lines: d.lines()}
		return streams
	}
	owner := make([]int, d.lines())
	if bySeries {
		// Series in order of first appearance, each to the writer with the
		// fewest lines so far.
		seed := maphash.MakeSeed()
		idx := map[uint64]int{}
		var counts []int
		for i := range owner {
			h := maphash.Bytes(seed, seriesKey(d.line(i)))
			s, ok := idx[h]
			if !ok {
				s = len(counts)
				idx[h] = s
				counts = append(counts, 0)
			}
			counts[s]++
			owner[i] = s
		}
		load := make([]int, n)
		writerOf := make([]int, len(counts))
		for s := range counts {
			w := 0
			for k := range load {
				if load[k] < load[w] {
					w = k
				}
			}
			writerOf[s] = w
			load[w] += counts[s]
		}
		for i := range owner {
			owner[i] = writerOf[owner[i]]
		}
	} else {
		for i := range owner {
			owner[i] = (i / batchLines) % n
		}
	}
	for i, w := range owner {
		streams[w].text = append(streams[w].text, d.line(i)...)
		streams[w].lines++
	}
	return streams
}

// writerBatches cuts the load into the HTTP bodies each of n writers
// sends, in order, for a --pattern: in order and resend partition the load
// (by series or by batch, see partition); concurrent deals consecutive
// batches to the writers in turn whatever bySeries says, so writers share
// series; backfill deals the batches newest first (the last batch of the
// load to writer 0, the one before it to writer 1, …).
func (d *benchData) writerBatches(pattern string, n int, bySeries bool, batchLines int) [][][]byte {
	out := make([][][]byte, n)
	switch pattern {
	case benchPatternBackfill:
		all := benchStream{text: d.text, lines: d.lines()}.batches(batchLines)
		for i := range all {
			w := i % n
			out[w] = append(out[w], all[len(all)-1-i])
		}
	default:
		streams := d.partition(n, bySeries && pattern != benchPatternConcurrent, batchLines)
		for i, s := range streams {
			out[i] = s.batches(batchLines)
		}
	}
	return out
}

// batches cuts a stream into pieces of at most n whole lines.
func (s benchStream) batches(n int) [][]byte {
	var out [][]byte
	text := s.text
	for len(text) > 0 {
		end := 0
		for k := 0; k < n && end < len(text); k++ {
			end += bytes.IndexByte(text[end:], '\n') + 1
		}
		out = append(out, text[:end])
		text = text[end:]
	}
	return out
}

// The TSBS devops use case: measurements in the order TSBS writes them at
// each timestamp, with their fields.
var (
	benchDevopsMeasurements = []struct {
		name   string
		fields []string
		floats int // the last floats fields are floats, the rest integers
	}{
		{"cpu", []string{"usage_user", "usage_system", "usage_idle", "usage_nice", "usage_iowait", "usage_irq", "usage_softirq", "usage_steal", "usage_guest", "usage_guest_nice"}, 0},
		{"diskio", []string{"reads", "writes", "read_bytes", "write_bytes", "read_time", "write_time", "io_time"}, 0},
		{"disk", []string{"total", "free", "used", "used_percent", "inodes_total", "inodes_free", "inodes_used"}, 0},
		{"kernel", []string{"boot_time", "interrupts", "context_switches", "processes_forked", "disk_pages_in", "disk_pages_out"}, 0},
		{"mem", []string{"total", "available", "used", "free", "cached", "buffered", "used_percent", "available_percent", "buffered_percent"}, 3},
		{"net", []string{"bytes_sent", "bytes_recv", "packets_sent", "packets_recv", "err_in", "err_out", "drop_in", "drop_out"}, 0},
		{"nginx", []string{"accepts", "active", "handled", "reading", "requests", "waiting", "writing"}, 0},
		{"postgresl", []string{"numbackends", "xact_commit", "xact_rollback", "blks_read", "blks_hit", "tup_returned", "tup_fetched", "tup_inserted", "tup_updated", "tup_deleted", "conflicts", "temp_files", "temp_bytes", "deadlocks", "blk_read_time", "blk_write_time"}, 0},
		{"redis", []string{"uptime_in_seconds", "total_connections_received", "expired_keys", "evicted_keys", "keyspace_hits", "keyspace_misses", "instantaneous_ops_per_sec", "instantaneous_input_kbps", "instantaneous_output_kbps", "connected_clients", "used_memory", "used_memory_rss", "used_memory_peak", "used_memory_lua", "rdb_changes_since_last_save", "sync_full", "sync_partial_ok", "sync_partial_err", "pubsub_channels", "pubsub_patterns", "latest_fork_usec", "connected_slaves", "master_repl_offset", "repl_backlog_active", "repl_backlog_size", "repl_backlog_histlen", "mem_fragmentation_ratio", "used_cpu_sys", "used_cpu_user", "used_cpu_sys_children", "used_cpu_user_children"}, 0},
	}
	benchRegions = []struct {
		name string
		dcs  string
	}{
		{"us-east-1", "abce"}, {"us-west-1", "ab"}, {"us-west-2", "abc"}, {"eu-west-1", "abc"}, {"eu-central-1", "ab"},
		{"ap-southeast-1", "ab"}, {"ap-southeast-2", "ab"}, {"ap-northeast-1", "ac"}, {"sa-east-1", "abc"},
	}
	benchOS     = []string{"Ubuntu16.10", "Ubuntu16.04LTS", "Ubuntu15.10"}
	benchArch   = []string{"x64", "x86"}
	benchTeam   = []string{"SF", "NYC", "LON", "CHI"}
	benchEnv    = []string{"production", "staging", "test"}
	benchFSType = []string{"ext3", "ext4", "btrfs", "xfs"}
)

// generateDevops writes TSBS-devops-shaped data: hosts hosts, each with the
// 9 measurements (10 host tags, TSBS's extra tags and fields), one line per
// host and measurement every interval from start for duration, so
// (series, timestamp) is unique. seed makes it reproducible. maxLines,
// when positive, stops it after that many lines.
func generateDevops(hosts int, start time.Time, duration, interval time.Duration, seed uint64, maxLines int) (*benchData, error) {
	if hosts < 1 || duration <= 0 || interval <= 0 {
		return nil, fmt.Errorf("generate: --scale, --duration and --interval must be positive")
	}
	steps := int((duration + interval - 1) / interval)
	rng := rand.New(rand.NewPCG(seed, 0x1e57d))
	type series struct {
		prefix []byte // "measurement,tags "
		vals   []float64
	}
	var all []series
	for h := range hosts {
		reg := benchRegions[rng.IntN(len(benchRegions))]
		host := fmt.Sprintf("hostname=host_%d,region=%s,datacenter=%s%c,rack=%d,os=%s,arch=%s,team=%s,service=%d,service_version=%d,service_environment=%s",
			h, reg.name, reg.name, reg.dcs[rng.IntN(len(reg.dcs))], rng.IntN(100), benchOS[rng.IntN(len(benchOS))],
			benchArch[rng.IntN(len(benchArch))], benchTeam[rng.IntN(len(benchTeam))], rng.IntN(20), rng.IntN(2), benchEnv[rng.IntN(len(benchEnv))])
		for _, m := range benchDevopsMeasurements {
			extra := ""
			switch m.name {
			case "diskio":
				extra = fmt.Sprintf(",serial=%03d-%03d-%03d", rng.IntN(1000), rng.IntN(1000), rng.IntN(1000))
			case "disk":
				extra = fmt.Sprintf(",path=/dev/sda%d,fstype=%s", rng.IntN(10), benchFSType[rng.IntN(len(benchFSType))])
			case "net":
				extra = fmt.Sprintf(",interface=eth%d", rng.IntN(4))
			case "nginx":
				extra = fmt.Sprintf(",port=%d,server=nginx_%d", rng.IntN(20000)+1024, rng.IntN(100000))
			case "redis":
				extra = fmt.Sprintf(",port=%d,server=redis_%d", rng.IntN(20000)+1024, rng.IntN(100000))
			}
			s := series{prefix: []byte(m.name + "," + host + extra + " "), vals: make([]float64, len(m.fields))}
			for i := range s.vals {
				s.vals[i] = float64(rng.IntN(100))
			}
			all = append(all, s)
		}
	}
	per := len(benchDevopsMeasurements)
	text := make([]byte, 0, steps*len(all)*400)
	t0 := start.UnixNano()
	lines := 0
	for step := range steps {
		ts := t0 + int64(step)*int64(interval)
		for mi, m := range benchDevopsMeasurements {
			for h := range hosts {
				if maxLines > 0 && lines == maxLines {
					break
				}
				lines++
				s := &all[h*per+mi]
				text = append(text, s.prefix...)
				nInt := len(m.fields) - m.floats
				for i, f := range m.fields {
					if i > 0 {
						text = append(text, ',')
					}
					text = append(text, f...)
					text = append(text, '=')
					// A bounded random walk, as TSBS's fields move.
					v := s.vals[i] + rng.Float64()*10 - 5
					v = min(max(v, 0), 100)
					s.vals[i] = v
					if i < nInt {
						text = strconv.AppendInt(text, int64(v), 10)
						text = append(text, 'i')
					} else {
						text = strconv.AppendFloat(text, v, 'f', -1, 64)
					}
				}
				text = append(text, ' ')
				text = strconv.AppendInt(text, ts, 10)
				text = append(text, '\n')
			}
		}
	}
	name := fmt.Sprintf("generated TSBS devops (scale %d, %s every %s from %s)", hosts, duration, interval, start.UTC().Format(time.RFC3339))
	return indexBenchData(name, text)
}

// writeBenchData is `ingestd bench --write-data FILE`: it writes the load
// (--file, or the generated TSBS-devops data) to FILE, which must not
// exist, as line protocol, gzip-compressed when FILE ends in .gz, so that
// the guide's TSBS steps and other clients (curl, Telegraf, /dev/tcp) can
// send the same data the harness does.
func writeBenchData(cfg *benchConfig, out io.Writer) (err error) {
	d, err := benchLoad(cfg)
	if err != nil {
		return err
	}
	f, err := os.OpenFile(cfg.writeData, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return fmt.Errorf("--write-data: %w", err)
	}
	defer func() {
		if cerr := f.Close(); err == nil && cerr != nil {
			err = fmt.Errorf("close %s: %w", cfg.writeData, cerr)
		}
	}()
	if !strings.HasSuffix(cfg.writeData, ".gz") {
		if _, err := f.Write(d.text); err != nil {
			return fmt.Errorf("write %s: %w", cfg.writeData, err)
		}
	} else {
		zw := gzip.NewWriter(f)
		if _, err := zw.Write(d.text); err != nil {
			return fmt.Errorf("write %s: %w", cfg.writeData, err)
		}
		if err := zw.Close(); err != nil {
			return fmt.Errorf("write %s: %w", cfg.writeData, err)
		}
	}
	fmt.Fprintf(out, "%s: %d lines, %d tables, %.2f MB of line protocol\n", cfg.writeData, d.lines(), len(d.stats), float64(len(d.text))/1e6)
	return nil
}
