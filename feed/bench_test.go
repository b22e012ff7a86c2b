package feed

import (
	"context"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// benchMeasurements are TSBS devops measurements with their extra tags and
// fields (all integers, as most of TSBS's are).
var benchMeasurements = []struct {
	name   string
	extra  []Tag
	fields []string
}{
	{"cpu", nil, strings.Split("usage_user,usage_system,usage_idle,usage_nice,usage_iowait,usage_irq,usage_softirq,usage_steal,usage_guest,usage_guest_nice", ",")},
	{"diskio", []Tag{{"serial", "653-658-401"}}, strings.Split("reads,writes,read_bytes,write_bytes,read_time,write_time,io_time", ",")},
	{"disk", []Tag{{"fstype", "btrfs"}, {"path", "/dev/sda8"}}, strings.Split("total,free,used,used_percent,inodes_total,inodes_free,inodes_used", ",")},
	{"kernel", nil, strings.Split("boot_time,interrupts,context_switches,processes_forked,disk_pages_in,disk_pages_out", ",")},
	{"mem", nil, strings.Split("total,available,used,free,cached,buffered,used_percent,available_percent,buffered_percent", ",")},
	{"net", []Tag{{"interface", "eth3"}}, strings.Split("bytes_sent,bytes_recv,packets_sent,packets_recv,err_in,err_out,drop_in,drop_out", ",")},
	{"nginx", []Tag{{"port", "20619"}, {"server", "nginx_80828"}}, strings.Split("accepts,active,handled,reading,requests,waiting,writing", ",")},
	{"postgresl", nil, strings.Split("numbackends,xact_commit,xact_rollback,blks_read,blks_hit,tup_returned,tup_fetched,tup_inserted,tup_updated,tup_deleted,conflicts,temp_files,temp_bytes,deadlocks,blk_read_time,blk_write_time", ",")},
	{"redis", []Tag{{"port", "4860"}, {"server", "redis_40013"}}, strings.Split("uptime_in_seconds,total_connections_received,expired_keys,evicted_keys,keyspace_hits,keyspace_misses,instantaneous_ops_per_sec,instantaneous_input_kbps,instantaneous_output_kbps,connected_clients,used_memory,used_memory_rss,used_memory_peak,used_memory_lua,rdb_changes_since_last_save,sync_full,sync_partial_ok,sync_partial_err,pubsub_channels,pubsub_patterns,latest_fork_usec,connected_slaves,master_repl_offset,repl_backlog_active,repl_backlog_size,repl_backlog_histlen,mem_fragmentation_ratio,used_cpu_sys,used_cpu_user,used_cpu_sys_children,used_cpu_user_children", ",")},
}

// benchBatches returns n batches of size TSBS-shaped points (hosts hosts,
// one line per host and measurement every 10 s, in TSBS order) as the
// parser would hand them on, and the bytes of the ILP lines they stand for.
func benchBatches(n, size, hosts int) ([]*Batch, int64) {
	var (
		out   []*Batch
		cur   = &Batch{}
		bytes int64
		ts    = int64(1767225600000000000)
	)
	for len(out) < n {
		for _, m := range benchMeasurements {
			for h := range hosts {
				host := "host_" + strconv.Itoa(h)
				tags := []Tag{{"arch", "x64"}, {"datacenter", "eu-central-1a"}, {"hostname", host}, {"os", "Ubuntu16.10"}, {"rack", "30"},
					{"region", "eu-central-1"}, {"service", "19"}, {"service_environment", "staging"}, {"service_version", "1"}, {"team", "NYC"}}
				tags = append(tags, m.extra...)
				var series []byte
				for i, t := range sortTags(tags) {
					if i > 0 {
						series = append(series, ',')
					}
					series = append(series, t.Key+"="+t.Value...)
				}
				fields := make([]PointField, len(m.fields))
				line := len(m.name) + 1 + len(series) + 1 + 20
				for i, f := range m.fields {
					fields[i] = PointField{Key: f, Value: Value{Kind: KindInt, Num: uint64(ts/1e9+int64(i)) % 100}}
					line += len(f) + 5
				}
				cur.Points = append(cur.Points, Point{Table: m.name, Series: string(series), Tags: tags, Fields: fields, Time: ts})
				bytes += int64(line)
				if len(cur.Points) == size {
					out = append(out, cur)
					cur = &Batch{}
					if len(out) == n {
						return out, bytes
					}
				}
			}
		}
		ts += 10e9
	}
	return out, bytes
}

func sortTags(tags []Tag) []Tag {
	for i := 1; i < len(tags); i++ {
		for j := i; j > 0 && tags[j-1].Key > tags[j].Key; j-- {
			tags[j-1], tags[j] = tags[j], tags[j-1]
		}
	}
	return tags
}

// BenchmarkAppend is the sequencer's commit path: batches of 5,000
// TSBS-shaped points appended to tables WITH SYNC on a real badger in
// b.TempDir() (fsync on), one batch at a time (each op is one group
// commit) and from 4 writers at once (group commits of several batches).
// Bytes are those of the ILP lines the points stand for.
func BenchmarkAppend(b *testing.B) {
	for _, bc := range []struct {
		name    string
		writers int
	}{{"writers=1", 1}, {"writers=4", 4}} {
		b.Run(bc.name, func(b *testing.B) {
			h := openBadgerHarness(b, DefaultConfig())
			defer h.close()
			ctx := context.Background()
			for _, m := range benchMeasurements {
				_, _, err := h.s.CreateTable(ctx, m.name, true)
				require.NoError(b, err)
			}
			const size = 5_000
			// Points must be new (time keeps rising): prepare enough for
			// the largest b.N this run will ask for, outside the timer.
			batches, lineBytes := benchBatches(bc.writers*max(b.N, 1), size, 100)
			b.SetBytes(lineBytes / int64(len(batches)) * int64(bc.writers))
			b.ReportAllocs()
			b.ResetTimer()
			next := 0
			for range b.N {
				group := batches[next : next+bc.writers]
				next += bc.writers
				pend := make([]*Pending, len(group))
				for i, bt := range group {
					var err error
					pend[i], err = h.s.Submit(ctx, bt)
					require.NoError(b, err)
				}
				for _, p := range pend {
					res, err := p.Wait(ctx)
					require.NoError(b, err)
					require.Equal(b, size, res.Accepted)
				}
			}
			b.StopTimer()
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*bc.writers*size), "ns/point")
		})
	}
}

// BenchmarkDrain is the feed's read path: one op drains a table of 50,000
// TSBS-shaped cpu points (real badger in b.TempDir()) from after=0 to its
// watermark in pages of 1,000 and 10,000 rows, visiting every value as
// the HTTP encoder would. ns/row is the cost per drained row.
func BenchmarkDrain(b *testing.B) {
	h := openBadgerHarness(b, DefaultConfig())
	defer h.close()
	ctx := context.Background()
	_, _, err := h.s.CreateTable(ctx, "cpu", true)
	require.NoError(b, err)
	const rows = 50_000
	batches, _ := benchBatches(rows/5_000*len(benchMeasurements), 5_000, 100)
	n := 0
	for _, bt := range batches {
		kept := bt.Points[:0]
		for _, p := range bt.Points {
			if p.Table == "cpu" && n < rows {
				kept = append(kept, p)
				n++
			}
		}
		if len(kept) == 0 {
			continue
		}
		bt.Points = kept
		_, err := h.s.Append(ctx, bt)
		require.NoError(b, err)
	}
	require.Equal(b, rows, n)
	for _, limit := range []int{1_000, 10_000} {
		b.Run("limit="+strconv.Itoa(limit), func(b *testing.B) {
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				var after, seen uint64
				for more := true; more; {
					pg, err := h.d.Drain(ctx, DrainRequest{Table: "cpu", After: after, Limit: limit}, func(_ []Column, vals []Value) error {
						for _, v := range vals {
							seen += v.Num
						}
						return nil
					})
					if err != nil {
						b.Fatal(err)
					}
					after, more = pg.Next, pg.More
				}
				if after != rows || seen == 0 {
					b.Fatalf("drained to %d of %d", after, rows)
				}
			}
			b.StopTimer()
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*rows), "ns/row")
		})
	}
}

// BenchmarkDrainFiltered is BenchmarkDrain's table drained with a tag
// filter that matches 1 % of it (one host of the TSBS cpu table's 100):
// the store skips the other series' fragments by series id, without
// decoding their fields (docs/contract.md#filters). rows/s counts the
// rows returned, fragments/s the fragments the drain covered.
func BenchmarkDrainFiltered(b *testing.B) {
	h := openBadgerHarness(b, DefaultConfig())
	defer h.close()
	ctx := context.Background()
	_, _, err := h.s.CreateTable(ctx, "cpu", true)
	require.NoError(b, err)
	const rows = 50_000
	batches, _ := benchBatches(rows/5_000*len(benchMeasurements), 5_000, 100)
	n, host, match := 0, "", 0
	for _, bt := range batches {
		kept := bt.Points[:0]
		for _, p := range bt.Points {
			if p.Table == "cpu" && n < rows {
				kept = append(kept, p)
				n++
				for _, tg := range p.Tags {
					if tg.Key == "hostname" && host == "" {
						host = tg.Value
					}
					if tg.Key == "hostname" && tg.Value == host {
						match++
					}
				}
			}
		}
		if len(kept) == 0 {
			continue
		}
		bt.Points = kept
		_, err := h.s.Append(ctx, bt)
		require.NoError(b, err)
	}
	require.Equal(b, rows, n)
	require.InDelta(b, rows/100, match, rows/200, "one host is about 1 %% of the table")
	req := DrainRequest{Table: "cpu", Limit: 1_000, Filter: Filter{Tags: []TagFilter{{Key: "hostname", Values: []string{host}}}}}
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		got := 0
		for after, more := uint64(0), true; more; {
			req.After = after
			pg, err := h.d.Drain(ctx, req, func(_ []Column, vals []Value) error {
				got++
				return nil
			})
			if err != nil {
				b.Fatal(err)
			}
			after, more = pg.Next, pg.More
		}
		if got != match {
			b.Fatalf("drained %d rows, %d match", got, match)
		}
	}
	b.StopTimer()
	b.ReportMetric(float64(b.N*match)/b.Elapsed().Seconds(), "rows/s")
	b.ReportMetric(float64(b.N*rows)/b.Elapsed().Seconds(), "fragments/s")
}
