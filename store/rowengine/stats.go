package rowengine

import (
	"encoding/binary"
	"sync"
	"time"

	"github.com/dgraph-io/badger/v4"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/ingestd/ingestd/store"
)

// DefaultTableStatsMaxAge is the default Config.TableStatsMaxAge.
const DefaultTableStatsMaxAge = 10 * time.Second

// tableStatsCache keeps each instance's last TableStats; mu also makes the
// scans run one at a time, so that no number of concurrent requests costs
// more than one scan of the store at once.
type tableStatsCache struct {
	mu    sync.Mutex
	byTID map[uint64]store.TableStats
	// swept is when the expired counts were last dropped: at most once
	// per Config.TableStatsMaxAge, not at every call (a list of 10,000
	// tables asks 10,000 counts: sweeping each time made it quadratic,
	// 1.2 s and 2 CPU s a request).
	swept time.Time
}

// countTable counts what table instance tid holds: one read of every key
// of the instance (values are not read, except the few header bytes of each
// block). A count younger than Config.TableStatsMaxAge is returned as is.
// Safe for concurrent use; scans run one at a time.
func (db *Engine) countTable(tid uint64) (store.TableStats, error) {
	c := &db.tableStats
	c.mu.Lock()
	defer c.mu.Unlock()
	now := time.Now()
	if now.Sub(c.swept) >= db.statsMaxAge {
		c.swept = now
		for id, s := range c.byTID { // forget dropped instances too
			if now.Sub(s.ComputedAt) >= db.statsMaxAge {
				delete(c.byTID, id)
			}
		}
	}
	if s, ok := c.byTID[tid]; ok && now.Sub(s.ComputedAt) < db.statsMaxAge {
		return s, nil
	}
	s, err := db.scanTableStats(tid)
	if err != nil {
		return store.TableStats{}, err
	}
	s.ComputedAt = now
	if db.statsMaxAge > 0 {
		c.byTID[tid] = s
	}
	return s, nil
}

func (db *Engine) scanTableStats(tid uint64) (store.TableStats, error) {
	var s store.TableStats
	// The points overwritten for the first time since the last flush
	// have no marker yet (a flush in between may count one twice: an
	// estimate).
	db.mu.Lock()
	if st := db.tables[tid]; st != nil {
		s.Overwritten = uint64(st.head.newDups)
		if st.sealed != nil {
			s.Overwritten += uint64(st.sealed.newDups)
		}
	}
	db.mu.Unlock()
	err := db.bdb.View(func(txn *badger.Txn) error {
		for _, ks := range []byte{ksSync, ksUnsync, ksRun, ksPoint, ksRef, ksOver, ksDup, ksSeries} {
			it := txn.NewIterator(badger.IteratorOptions{Prefix: tablePrefix(ks, tid)})
			for it.Rewind(); it.Valid(); it.Next() {
				item := it.Item()
				s.Bytes += uint64(item.EstimatedSize())
				switch ks {
				case ksSync, ksUnsync:
					var n uint64
					if err := item.Value(func(v []byte) error {
						var err error
						n, err = blockCount(v)
						return err
					}); err != nil {
						it.Close()
						return &store.CorruptionError{Key: item.KeyCopy(nil), Err: err}
					}
					s.Fragments += n
				case ksDup:
					s.Overwritten++
				case ksSeries:
					s.Series++
				}
			}
			it.Close()
		}
		return nil
	})
	return s, err
}

// blockCount reads the fragment count from a block's header (uvarint
// firstSeq, varint commit time, uvarint count; see doc.go).
func blockCount(v []byte) (uint64, error) {
	_, n := binary.Uvarint(v)
	if n <= 0 {
		return 0, errShort
	}
	v = v[n:]
	if _, n = binary.Varint(v); n <= 0 {
		return 0, errShort
	}
	count, n := binary.Uvarint(v[n:])
	if n <= 0 {
		return 0, errShort
	}
	return count, nil
}

// freeSpace reports the free space of the data directory's file system in
// bytes (0 for an in-memory store).
func (db *Engine) freeSpace() (uint64, error) {
	if db.dir == "" || db.lock == nil {
		return 0, nil
	}
	return db.freeBytes(db.dir)
}

var freeDesc = prometheus.NewDesc("ingestd_store_free_bytes",
	"Free space of the data directory's file system in bytes (ingestd stops writing below --store-min-free-bytes).", nil, nil)

// freeCollector reports FreeBytes at each scrape.
type freeCollector struct{ db *Engine }

func (c freeCollector) Describe(ch chan<- *prometheus.Desc) { ch <- freeDesc }

func (c freeCollector) Collect(ch chan<- prometheus.Metric) {
	if free, err := c.db.freeSpace(); err == nil {
		ch <- prometheus.MustNewConstMetric(freeDesc, prometheus.GaugeValue, float64(free))
	}
}
