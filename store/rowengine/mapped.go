package rowengine

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// mappedInterval is how often the process's resident file pages are
// compared with Config.MaxMappedBytes.
const mappedInterval = time.Second

// mappedState bounds the pages of badger's memory-mapped files that the
// process keeps resident (RssFile): badger writes its value log and
// reads its tables through mappings, so every page written or read
// stays counted in the process's RSS until the kernel needs it back,
// and that grows with the store. When RssFile passes the bound, the
// mappings of the value-log files badger no longer writes, oldest first,
// then of the LSM tables are paged out (madvise MADV_PAGEOUT, Linux 5.4
// and later) until a quarter of the bound is free: a later read of them
// faults their pages in again, from the disk. Paging out all of them at
// once made every late point's look-up and every drain read the disk:
// at 150,000 lines/s offered to a 1,000-series soak, commits then
// stalled for 25 s with the CPU half idle. The memtable logs and the
// value-log file being
// written are never paged out, so RssFile stays above their resident
// size whatever the bound. Paging out is a hint that keeps every
// byte's content, so a mapping badger replaced meanwhile costs at worst
// a page fault, never data.
type mappedState struct {
	max  int64
	stop chan struct{}
	done chan struct{}

	resident prometheus.Gauge
	pageOuts prometheus.Counter
}

func newMappedState(maxBytes int64) *mappedState {
	return &mappedState{
		max:  maxBytes,
		stop: make(chan struct{}),
		done: make(chan struct{}),
		resident: prometheus.NewGauge(prometheus.GaugeOpts{Name: "ingestd_store_mapped_resident_bytes",
			Help: "The process's resident pages of memory-mapped files (RssFile), read every second; above --store-max-mapped-bytes the value-log files badger no longer writes (oldest first), then the LSM tables, are paged out until a quarter of the bound is free."}),
		pageOuts: prometheus.NewCounter(prometheus.CounterOpts{Name: "ingestd_store_mapped_page_outs_total",
			Help: "Times the resident pages of memory-mapped files passed --store-max-mapped-bytes and mappings of badger's files were paged out."}),
	}
}

// runMappedBound checks RssFile every mappedInterval until Close and
// pages out when it is above the bound. A system without the figures
// (no /proc) or without MADV_PAGEOUT logs once and stops checking.
func (db *Engine) runMappedBound(m *mappedState) {
	defer close(m.done)
	t := time.NewTicker(mappedInterval)
	defer t.Stop()
	for {
		select {
		case <-m.stop:
			return
		case <-t.C:
		}
		rss, err := residentFileBytes()
		if err != nil {
			db.logger.Warn("--store-max-mapped-bytes: resident file pages cannot be read here; not bounded", "err", err)
			return
		}
		m.resident.Set(float64(rss))
		if rss <= m.max {
			continue
		}
		if err := pageOutMappings(db.dir, rss-m.max*3/4); err != nil {
			db.logger.Warn("--store-max-mapped-bytes: paging out badger's files failed; not bounded", "err", err)
			return
		}
		m.pageOuts.Inc()
	}
}
