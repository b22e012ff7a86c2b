package rowengine

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/dgraph-io/badger/v4"
	"github.com/prometheus/client_golang/prometheus"
)

// gcState is the background value-log collector (see doc.go, "Space
// given back").
type gcState struct {
	stop chan struct{}
	done chan struct{}
	// mu serializes passes (the background loop and collectGarbage).
	mu sync.Mutex

	runs     *prometheus.CounterVec
	seconds  prometheus.Counter
	rewrites prometheus.Counter
}

func newGCState() *gcState {
	return &gcState{
		stop: make(chan struct{}),
		done: make(chan struct{}),
		runs: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "ingestd_store_gc_passes_total",
			Help: "Value-log garbage collection passes by result (rewrote: at least one file rewritten and deleted; nothing; error)."}, []string{"result"}),
		seconds: prometheus.NewCounter(prometheus.CounterOpts{Name: "ingestd_store_gc_seconds_total",
			Help: "Time spent in value-log garbage collection passes, pauses for --store-gc-max-bytes-per-second excluded."}),
		rewrites: prometheus.NewCounter(prometheus.CounterOpts{Name: "ingestd_store_gc_file_rewrites_total",
			Help: "Value-log files rewritten (their live values copied forward) and deleted by the garbage collector."}),
	}
}

// runGC is the background loop: a pass every interval until Close.
func (db *Engine) runGC(interval time.Duration, bytesPerSecond int64) {
	defer close(db.gc.done)
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-db.gc.stop:
			return
		case <-t.C:
			if _, err := db.collect(bytesPerSecond); err != nil {
				db.logger.Warn("value-log garbage collection", "err", err)
			}
		}
	}
}

// collectGarbage runs one value-log garbage collection pass now: it
// rewrites, one at a time, every value-log file at least
// Config.GCDiscardRatio of which is garbage (values of deleted or
// rewritten keys, as badger's compactions have counted them), deleting
// the old file, and waits between two rewrites as long as writing one
// file takes at --store-gc-max-bytes-per-second. It returns how many files it rewrote. The file badger is
// writing to is never rewritten. Safe for concurrent use; passes run one
// at a time.
func (db *Engine) collectGarbage() (int, error) { return db.collect(db.gcBytesPerSecond) }

func (db *Engine) collect(bytesPerSecond int64) (n int, err error) {
	if db.gc == nil {
		return 0, nil
	}
	db.gc.mu.Lock()
	defer db.gc.mu.Unlock()
	start := time.Now()
	paused := time.Duration(0)
	defer func() {
		db.gc.seconds.Add((time.Since(start) - paused).Seconds())
		switch {
		case err != nil:
			db.gc.runs.WithLabelValues("error").Inc()
		case n > 0:
			db.gc.runs.WithLabelValues("rewrote").Inc()
		default:
			db.gc.runs.WithLabelValues("nothing").Inc()
		}
	}()
	for {
		_, before := db.diskSize()
		err := db.bdb.RunValueLogGC(db.gcDiscardRatio)
		if errors.Is(err, badger.ErrNoRewrite) || errors.Is(err, badger.ErrRejected) {
			return n, nil
		}
		if err != nil {
			return n, err
		}
		n++
		db.gc.rewrites.Inc()
		// Bound the I/O: a rewrite reads one file (at most the value log's
		// size, at most MaxValueBytes plus its last value) and writes its
		// live part; pause as long as that many bytes take at the rate.
		if bytesPerSecond > 0 {
			wait := time.Duration(float64(min(before, 2*MaxValueBytes)) / float64(bytesPerSecond) * float64(time.Second))
			t := time.NewTimer(wait)
			select {
			case <-t.C:
			case <-db.gc.stop:
				t.Stop()
				return n, nil
			}
			paused += wait
		}
	}
}

// diskSize returns the bytes the data directory's files occupy on disk
// (allocated blocks, as du counts them: badger preallocates value-log
// files sparsely), the LSM tree's (.sst) and the value log's (.vlog)
// apart; the memtable logs, manifest and other files count as lsm.
func (db *Engine) diskSize() (lsm, vlog int64) {
	lsm, vlog, _, _ = db.diskFiles()
	return lsm, vlog
}

// diskFiles is diskSize with the number of files of each part: badger
// keeps every one of them open and mapped.
func (db *Engine) diskFiles() (lsm, vlog int64, lsmFiles, vlogFiles int) {
	if db.dir == "" || db.lock == nil {
		l, v := db.bdb.Size()
		return l, v, 0, 0
	}
	entries, err := os.ReadDir(db.dir)
	if err != nil {
		return 0, 0, 0, 0
	}
	for _, e := range entries {
		info, err := e.Info()
		if err != nil || !info.Mode().IsRegular() {
			continue // deleted meanwhile
		}
		size := info.Size()
		if st, ok := info.Sys().(*syscall.Stat_t); ok {
			size = st.Blocks * 512
		}
		if filepath.Ext(e.Name()) == ".vlog" {
			vlog += size
			vlogFiles++
		} else {
			lsm += size
			lsmFiles++
		}
	}
	return lsm, vlog, lsmFiles, vlogFiles
}

// sizeCollector reports the data directory's size at every scrape.
type sizeCollector struct{ db *Engine }

var sizeDesc = prometheus.NewDesc("ingestd_store_size_bytes",
	"Bytes the data directory occupies on disk (allocated blocks, measured at each scrape) by part: vlog (value-log files), lsm (everything else: LSM tables, memtable logs, manifest).",
	[]string{"part"}, nil)

var filesDesc = prometheus.NewDesc("ingestd_store_files",
	"Files in the data directory by part (as ingestd_store_size_bytes): badger keeps each open and memory-mapped, so they count against the process's descriptor limit and Linux's vm.max_map_count (65,530 by default); --store-value-log-max-entries sets how many values a value-log file holds.",
	[]string{"part"}, nil)

func (c sizeCollector) Describe(ch chan<- *prometheus.Desc) { ch <- sizeDesc; ch <- filesDesc }

func (c sizeCollector) Collect(ch chan<- prometheus.Metric) {
	lsm, vlog, lsmFiles, vlogFiles := c.db.diskFiles()
	ch <- prometheus.MustNewConstMetric(sizeDesc, prometheus.GaugeValue, float64(lsm), "lsm")
	ch <- prometheus.MustNewConstMetric(sizeDesc, prometheus.GaugeValue, float64(vlog), "vlog")
	ch <- prometheus.MustNewConstMetric(filesDesc, prometheus.GaugeValue, float64(lsmFiles), "lsm")
	ch <- prometheus.MustNewConstMetric(filesDesc, prometheus.GaugeValue, float64(vlogFiles), "vlog")
}

// lsmCollector reports the LSM tree's shape and how long the write path
// waited on it, at every scrape.
type lsmCollector struct{ db *Engine }

var (
	lsmTablesDesc = prometheus.NewDesc("ingestd_store_lsm_tables",
		"LSM tables by level (0 is the newest; badger stops flushing memtables while level 0 holds 15).",
		[]string{"level"}, nil)
	lsmStallDesc = prometheus.NewDesc("ingestd_store_write_stall_seconds_total",
		"Time the write path waited on the LSM tree, by stage: l0 (a memtable flush waiting for level 0 to drop below 15 tables), memtable (a commit waiting for a full memtable to be flushed).",
		[]string{"stage"}, nil)
)

func (c lsmCollector) Describe(ch chan<- *prometheus.Desc) { ch <- lsmTablesDesc; ch <- lsmStallDesc }

func (c lsmCollector) Collect(ch chan<- prometheus.Metric) {
	for _, l := range c.db.bdb.Levels() {
		ch <- prometheus.MustNewConstMetric(lsmTablesDesc, prometheus.GaugeValue, float64(l.NumTables), strconv.Itoa(l.Level))
	}
	l0, mt := c.db.bdb.StallTimes()
	ch <- prometheus.MustNewConstMetric(lsmStallDesc, prometheus.CounterValue, l0.Seconds(), "l0")
	ch <- prometheus.MustNewConstMetric(lsmStallDesc, prometheus.CounterValue, mt.Seconds(), "memtable")
}
