package ilp

import (
	"bytes"
	"strconv"
	"strings"
	"testing"

	"github.com/ingestd/ingestd/feed"
)

// benchTSBSTemplates are one line of each TSBS devops measurement (from
// the TSBS data set, host_0, without the timestamp).
var benchTSBSTemplates = []string{
	"cpu,hostname=host_0,region=sa-east-1,datacenter=sa-east-1c,rack=60,os=Ubuntu15.10,arch=x86,team=LON,service=1,service_version=0,service_environment=staging usage_user=37i,usage_system=6i,usage_idle=60i,usage_nice=20i,usage_iowait=4i,usage_irq=38i,usage_softirq=81i,usage_steal=38i,usage_guest=38i,usage_guest_nice=64i",
	"diskio,hostname=host_0,region=sa-east-1,datacenter=sa-east-1c,rack=60,os=Ubuntu15.10,arch=x86,team=LON,service=1,service_version=0,service_environment=staging,serial=929-967-815 reads=0i,writes=0i,read_bytes=0i,write_bytes=0i,read_time=0i,write_time=0i,io_time=0i",
	"disk,hostname=host_0,region=sa-east-1,datacenter=sa-east-1c,rack=60,os=Ubuntu15.10,arch=x86,team=LON,service=1,service_version=0,service_environment=staging,path=/dev/sda8,fstype=btrfs total=1099511627776i,free=549755813888i,used=549755813888i,used_percent=50i,inodes_total=268435456i,inodes_free=134217728i,inodes_used=134217728i",
	"kernel,hostname=host_0,region=sa-east-1,datacenter=sa-east-1c,rack=60,os=Ubuntu15.10,arch=x86,team=LON,service=1,service_version=0,service_environment=staging boot_time=44i,interrupts=0i,context_switches=0i,processes_forked=0i,disk_pages_in=0i,disk_pages_out=0i",
	"mem,hostname=host_0,region=sa-east-1,datacenter=sa-east-1c,rack=60,os=Ubuntu15.10,arch=x86,team=LON,service=1,service_version=0,service_environment=staging total=17179869184i,available=4880696374i,used=12299172810i,free=4880696374i,cached=16177788280i,buffered=16677884034i,used_percent=71.59060804406181,available_percent=28.40939195593819,buffered_percent=97.07806186052039",
	"net,hostname=host_0,region=sa-east-1,datacenter=sa-east-1c,rack=60,os=Ubuntu15.10,arch=x86,team=LON,service=1,service_version=0,service_environment=staging,interface=eth2 bytes_sent=0i,bytes_recv=0i,packets_sent=0i,packets_recv=0i,err_in=0i,err_out=0i,drop_in=0i,drop_out=0i",
	"nginx,hostname=host_0,region=sa-east-1,datacenter=sa-east-1c,rack=60,os=Ubuntu15.10,arch=x86,team=LON,service=1,service_version=0,service_environment=staging,port=9197,server=nginx_2934 accepts=0i,active=0i,handled=0i,reading=0i,requests=0i,waiting=0i,writing=0i",
	"postgresl,hostname=host_0,region=sa-east-1,datacenter=sa-east-1c,rack=60,os=Ubuntu15.10,arch=x86,team=LON,service=1,service_version=0,service_environment=staging numbackends=0i,xact_commit=0i,xact_rollback=0i,blks_read=0i,blks_hit=0i,tup_returned=0i,tup_fetched=0i,tup_inserted=0i,tup_updated=0i,tup_deleted=0i,conflicts=0i,temp_files=0i,temp_bytes=0i,deadlocks=0i,blk_read_time=0i,blk_write_time=0i",
	"redis,hostname=host_0,region=sa-east-1,datacenter=sa-east-1c,rack=60,os=Ubuntu15.10,arch=x86,team=LON,service=1,service_version=0,service_environment=staging,port=9502,server=redis_41275 uptime_in_seconds=0i,total_connections_received=0i,expired_keys=0i,evicted_keys=0i,keyspace_hits=0i,keyspace_misses=0i,instantaneous_ops_per_sec=0i,instantaneous_input_kbps=0i,instantaneous_output_kbps=0i,connected_clients=0i,used_memory=8589934592i,used_memory_rss=8589934592i,used_memory_peak=8589934592i,used_memory_lua=8589934592i,rdb_changes_since_last_save=0i,sync_full=0i,sync_partial_ok=0i,sync_partial_err=0i,pubsub_channels=0i,pubsub_patterns=0i,latest_fork_usec=0i,connected_slaves=0i,master_repl_offset=0i,repl_backlog_active=0i,repl_backlog_size=0i,repl_backlog_histlen=0i,mem_fragmentation_ratio=0i,used_cpu_sys=0i,used_cpu_user=0i,used_cpu_sys_children=0i,used_cpu_user_children=0i",
}

// benchTSBS returns n TSBS devops lines as TSBS writes them: for each
// timestamp (10 s apart), each measurement for each of hosts hosts.
func benchTSBS(n, hosts int) []byte {
	var b bytes.Buffer
	ts := int64(1767225600000000000)
	for b.Len() == 0 || bytes.Count(b.Bytes(), []byte{'\n'}) < n {
		for _, tpl := range benchTSBSTemplates {
			for h := 0; h < hosts; h++ {
				b.WriteString(strings.Replace(tpl, "hostname=host_0,", "hostname=host_"+strconv.Itoa(h)+",", 1))
				b.WriteByte(' ')
				b.WriteString(strconv.FormatInt(ts, 10))
				b.WriteByte('\n')
			}
		}
		ts += 10e9
	}
	lines := b.Bytes()
	end := 0
	for range n {
		end += bytes.IndexByte(lines[end:], '\n') + 1
	}
	return lines[:end]
}

// BenchmarkParseAll parses 10,000 TSBS devops lines per op with a fresh
// batch: http as the HTTP handler parses a body (a pooled Parser, its known
// series warm, Reuse once the batch is answered), tcp as a connection does
// (one Parser, no Reuse: a batch is in flight while the next is parsed),
// fresh with a new Parser each time (what HTTP did before the pool).
func BenchmarkParseAll(b *testing.B) {
	for _, bc := range []struct {
		name  string
		fresh bool // a new Parser per op, or one for all (a TCP connection)
		reuse bool // Reuse after each op, as a pooled HTTP parser
	}{{"fresh", true, false}, {"tcp", false, false}, {"http", false, true}} {
		b.Run(bc.name, func(b *testing.B) {
			data := benchTSBS(10_000, 100)
			p := NewParser(DefaultLimits())
			b.SetBytes(int64(len(data)))
			b.ReportAllocs()
			for b.Loop() {
				if bc.fresh {
					p = NewParser(DefaultLimits())
				}
				batch := &feed.Batch{}
				perrs, _ := p.ParseAll(batch, data, 1, Nanosecond, 0)
				if len(perrs) > 0 || len(batch.Points) != 10_000 {
					b.Fatalf("%d points, errors %v", len(batch.Points), perrs)
				}
				if bc.reuse {
					p.Reuse()
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/10_000, "ns/line")
		})
	}
}
