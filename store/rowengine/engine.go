package rowengine

import (
	"cmp"
	"encoding/binary"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"github.com/dgraph-io/badger/v4"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/ingestd/ingestd/store"
)

// Default values of Config.
const (
	DefaultDir             = "./data"
	DefaultBlockCacheBytes = 64 << 20
	// DefaultMemTableBytes is Config.MemTableBytes' default. badger keeps
	// two memtables and builds a flush's level-0 table in memory, so the
	// heap holds about four times it at a flush. At 64 MiB, offered
	// 180,000 lines/s, a flush and the level-0 compaction it started took
	// the heap near the default --memory-limit-bytes, where the collector
	// works harder, and the acknowledged rate fell by 30-40 % for 10-20 s;
	// with a 1 GiB limit, or at 32 MiB, it fell by less than 10 %
	// (docs/performance.md#twice-the-sustained-rate).
	DefaultMemTableBytes = 32 << 20
	// DefaultHeadMaxEntries is Config.HeadMaxEntries' default: about 40
	// MiB of run entries in memory.
	DefaultHeadMaxEntries = 1 << 20
	// DefaultHeadMaxBytes is Config.HeadMaxBytes' default: far above what
	// 1 Mi entries of new points take (their head records are a few
	// bytes a point), reached by overwrites of large rows, whose records
	// hold each point's row.
	DefaultHeadMaxBytes = 64 << 20
	DefaultMinFreeBytes = 256 << 20
	// DefaultGCInterval is how often the value-log garbage collector runs.
	// A pass that finds no file at least --store-gc-discard-ratio garbage
	// costs a look at badger's discard counts, so it runs often enough
	// that space comes back within seconds of a TRUNCATE, DROP or
	// retention sweep.
	DefaultGCInterval = 2 * time.Second
	// DefaultGCMaxBytesPerSecond bounds the collector's I/O.
	DefaultGCMaxBytesPerSecond = 64 << 20
	// DefaultGCDiscardRatio is the garbage share at which the collector
	// rewrites a value-log file. Tables share value-log files, so one
	// table's retention, truncation or drop leaves files of another's live
	// blocks partly garbage, and so does the head flush where a head
	// record went to the value log (a commit of more than about 250
	// points of a table): a third of a file is space badger's usual 0.5
	// never gives back (doc.go, "Bytes per line").
	DefaultGCDiscardRatio = 0.3
	// DefaultMaxMappedBytes bounds the resident pages of badger's mapped
	// files (mapped.go): with the Go heap under --memory-limit-bytes
	// (512 MiB), the process's RSS stays near 1 GiB.
	DefaultMaxMappedBytes = 512 << 20
	// DefaultValueLogMaxEntries is how many values a value-log file holds
	// at most before badger starts the next one. The newest file's
	// garbage is never collected, so fewer means space back sooner; but
	// every file is a creation (a mapping sized for the largest value,
	// synced), a descriptor and a mapping for as long as it lives, and
	// under many small commits (a block and a head record per table per
	// commit, about 1.7 KB each at 1,000 series) 256 made files of 430 KB:
	// six a second at 90,000 lines/s, a process's 20,000 descriptors
	// within the hour. 4,096 makes files of about 7 MB there, and caps a
	// file of large blocks at badger's 256 MiB size bound.
	DefaultValueLogMaxEntries = 4096
)

// Config configures the store.
type Config struct {
	// Dir is the data directory; created when missing.
	Dir string
	// InMemory keeps everything in memory (tests only): nothing survives
	// Close, Dir is ignored, and no value (a block) may exceed 1 MiB.
	InMemory bool
	// UnsafeNoSync skips the fsync of each commit. A crash may then lose
	// acknowledged writes. Off by default.
	UnsafeNoSync bool
	// BlockCacheBytes is badger's block cache size in bytes.
	BlockCacheBytes int64
	// MemTableBytes is badger's memtable size in bytes; one commit
	// transaction holds at most about 15 % of it (larger commits are split).
	MemTableBytes int64
	// MinFreeBytes is the free space the data directory's file system must
	// keep: Open and every write refuse with ErrDiskFull below it. badger
	// writes through memory-mapped files, and a write to a full disk would
	// kill the process (SIGBUS) instead of returning an error, so the store
	// stops before: badger's background flushes and compactions need room
	// too. 0 disables the check.
	MinFreeBytes int64
	// GCInterval is how often the value-log garbage collector runs in the
	// background (collectGarbage); 0 disables it.
	GCInterval time.Duration
	// GCMaxBytesPerSecond bounds the collector's I/O: after rewriting a
	// file it pauses as long as reading and writing that file takes at this
	// rate. 0: no pause.
	GCMaxBytesPerSecond int64
	// GCDiscardRatio is the share of a value-log file (0 < r < 1) that
	// must be garbage, as badger's compactions have counted it, for the
	// collector to rewrite the file: lower gives more space back at the
	// cost of copying more live values forward (at most (1-r)/r bytes
	// copied per byte given back).
	GCDiscardRatio float64
	// MaxMappedBytes bounds the pages of badger's memory-mapped files the
	// process keeps resident (RssFile, checked every second): past it the
	// value-log files badger no longer writes, oldest first, then the LSM
	// tables are paged out until a quarter of it is free (Linux; see
	// mappedState). 0: no bound, the kernel alone decides.
	MaxMappedBytes int64
	// ValueLogMaxEntries is how many values (blocks, and index values
	// above 4 KiB) one value-log file holds before badger starts the next
	// (also past MaxValueBytes). Only a file badger no longer writes can be
	// collected, so this bounds how much dead space the newest file can
	// hold: lower means space comes back sooner, at the cost of more files
	// (each an open file and a mapping, and one more step for each
	// collection pass). It is a count and not a size because badger's file
	// size bound is also its largest value, which a table's block of one
	// group commit (up to --feed-max-group-bytes) must stay below.
	ValueLogMaxEntries int
	// TableStatsMaxAge is how long TableStats keeps a table's counts before
	// counting again (0: count at every call). Counting reads every key of
	// the table, so this bounds what frequent status-page and
	// /api/v1/tables requests cost.
	TableStatsMaxAge time.Duration
	// HeadMaxEntries is how many head entries (one per new point or overwrite)
	// the head keeps in memory before it stores them as run keys (doc.go,
	// "The head"): more means fewer LSM writes per point and a longer
	// replay of head records at Open after a crash; about 40 bytes each.
	HeadMaxEntries int
	// HeadMaxBytes is how many bytes of head records the head keeps in
	// memory before it stores them, whichever of it and HeadMaxEntries
	// comes first: an overwrite's entry holds the point's row, so a
	// million overwrites of 1 KB rows would hold a gigabyte.
	HeadMaxBytes int64
}

// DefaultConfig returns the defaults.
func DefaultConfig() Config {
	return Config{Dir: DefaultDir, BlockCacheBytes: DefaultBlockCacheBytes, MemTableBytes: DefaultMemTableBytes, MinFreeBytes: DefaultMinFreeBytes,
		GCInterval: DefaultGCInterval, GCMaxBytesPerSecond: DefaultGCMaxBytesPerSecond, GCDiscardRatio: DefaultGCDiscardRatio, MaxMappedBytes: DefaultMaxMappedBytes, ValueLogMaxEntries: DefaultValueLogMaxEntries,
		TableStatsMaxAge: DefaultTableStatsMaxAge, HeadMaxEntries: DefaultHeadMaxEntries, HeadMaxBytes: DefaultHeadMaxBytes}
}

// RegisterFlags registers the store's flags on fs.
func (c *Config) RegisterFlags(fs *flag.FlagSet) {
	fs.StringVar(&c.Dir, "data-dir", c.Dir, "data directory (badger database and lock file)")
	fs.BoolVar(&c.UnsafeNoSync, "store-unsafe-no-sync", c.UnsafeNoSync, "do not fsync commits: a crash may lose acknowledged writes")
	fs.Int64Var(&c.BlockCacheBytes, "store-block-cache-bytes", c.BlockCacheBytes, "badger block cache size in bytes")
	fs.Int64Var(&c.MemTableBytes, "store-memtable-bytes", c.MemTableBytes, "badger memtable size in bytes")
	fs.Int64Var(&c.MinFreeBytes, "store-min-free-bytes", c.MinFreeBytes, "free space the data directory must keep: below it writes fail and ingestd stops (0: no check)")
	fs.DurationVar(&c.GCInterval, "store-gc-interval", c.GCInterval, "how often the value-log garbage collector gives the space of removed data back (0: never)")
	fs.Int64Var(&c.GCMaxBytesPerSecond, "store-gc-max-bytes-per-second", c.GCMaxBytesPerSecond, "I/O bound of the value-log garbage collector: after rewriting a file it pauses as long as that file takes at this rate (0: no pause)")
	fs.Float64Var(&c.GCDiscardRatio, "store-gc-discard-ratio", c.GCDiscardRatio, "share of a value-log file that must be garbage (deleted or rewritten values) for the collector to rewrite it, within (0, 1): lower gives more space back and copies more live values forward")
	fs.Int64Var(&c.MaxMappedBytes, "store-max-mapped-bytes", c.MaxMappedBytes, "resident pages of badger's memory-mapped files (the process's RssFile) past which the value-log files badger no longer writes (oldest first), then the LSM tables, are paged out until a quarter of it is free, checked every second (Linux 5.4 and later; 0: no bound); the memtable logs and the value-log file being written stay resident")
	fs.IntVar(&c.ValueLogMaxEntries, "store-value-log-max-entries", c.ValueLogMaxEntries, "values (blocks) per value-log file before the next is started: only files badger no longer writes are collected, so lower gives space back sooner, at the cost of more files (each a descriptor and a memory mapping; raise it on a large store that rarely deletes)")
	fs.DurationVar(&c.TableStatsMaxAge, "store-table-stats-max-age", c.TableStatsMaxAge, "how long a table's counted fragments, rows and bytes are reused before they are counted again (0: every request counts)")
	fs.Int64Var(&c.HeadMaxBytes, "store-head-max-bytes", c.HeadMaxBytes, "bytes of head records (a few per new point; an overwrite's holds the point's row) kept in memory before the head is stored, whichever of it and --store-head-max-entries comes first")
	fs.IntVar(&c.HeadMaxEntries, "store-head-max-entries", c.HeadMaxEntries, "head entries (one per new point, about 40 bytes, or per overwrite, about 40 bytes plus the point's row) kept in memory before they are stored as run keys and point entries: more means fewer LSM writes per point and a longer replay after a crash (1: store them at every commit)")
}

// Validate reports the first invalid setting.
func (c *Config) Validate() error {
	if c.Dir == "" && !c.InMemory {
		return errors.New("store: --data-dir must not be empty")
	}
	if c.BlockCacheBytes < 0 {
		return errors.New("store: --store-block-cache-bytes must not be negative")
	}
	if c.MemTableBytes < 1<<20 {
		return errors.New("store: --store-memtable-bytes must be at least 1 MiB")
	}
	if c.MinFreeBytes < 0 {
		return errors.New("store: --store-min-free-bytes must not be negative")
	}
	if c.GCInterval < 0 {
		return errors.New("store: --store-gc-interval must not be negative")
	}
	if c.GCMaxBytesPerSecond < 0 {
		return errors.New("store: --store-gc-max-bytes-per-second must not be negative")
	}
	if !(c.GCDiscardRatio > 0 && c.GCDiscardRatio < 1) {
		return errors.New("store: --store-gc-discard-ratio must be within (0, 1)")
	}
	if c.MaxMappedBytes < 0 {
		return errors.New("store: --store-max-mapped-bytes must not be negative")
	}
	if c.ValueLogMaxEntries < 1 || c.ValueLogMaxEntries > math.MaxInt32 {
		return errors.New("store: --store-value-log-max-entries must be within 1..2147483647")
	}
	if c.TableStatsMaxAge < 0 {
		return errors.New("store: --store-table-stats-max-age must not be negative")
	}
	if c.HeadMaxEntries < 1 {
		return errors.New("store: --store-head-max-entries must be at least 1")
	}
	if c.HeadMaxBytes < 1 {
		return errors.New("store: --store-head-max-bytes must be at least 1")
	}
	return nil
}

// Engine is the row engine of one data directory (doc.go). Apply,
// SweepBefore, RaiseHorizon and DropInstance must be called from one
// goroutine at a time (the owner's writer); every other method is safe for
// concurrent use.
type Engine struct {
	bdb    *badger.DB
	lock   *os.File
	logger *slog.Logger
	dir    string
	// minFree is Config.MinFreeBytes (0: no check); freeBytes reports the
	// free space of dir's file system (replaced by tests).
	minFree   int64
	freeBytes func(dir string) (uint64, error)

	// nextBlock is the next unsynced block number; touched by the
	// writer's calls only.
	nextBlock uint64
	// blockBody and blockOffs are the block encoder's scratch space
	// (appendBlock), kept across commits unless larger than
	// maxScratchBodyBytes; touched by the writer's calls only.
	blockBody []byte
	blockOffs []uint64

	mu     sync.Mutex             // guards tables
	tables map[uint64]*tableState // by table instance id

	// gate is held by every exported call (api.go) and closed by Close.
	gate store.CloseGate

	stats lookupStats
	// headSeq numbers the next head record; headMax is
	// Config.HeadMaxEntries and headMaxBytes Config.HeadMaxBytes;
	// headFlushes counts flushHeads. Writer only.
	headSeq      uint64
	headMax      int
	headMaxBytes int64
	headFlushes  prometheus.Counter
	// flush is the head flush in progress (nil when none) and flushErr
	// the error of one that failed (head.go, reapFlush). Writer only.
	flush    *headFlush
	flushErr error
	// flushGen counts the transactions head flushes committed: a commit's
	// look-up view older than the last of them is renewed (lookup.open).
	flushGen atomic.Uint64
	// keysWritten counts the keys commits and flushes write (LSM writes).
	keysWritten prometheus.Counter
	// upgradeFrom is the layout version Open found when older than
	// layoutVersion (0 otherwise), until upgrade converted it.
	upgradeFrom uint64

	// gc is the value-log collector (nil in memory); gcDiscardRatio is
	// Config.GCDiscardRatio; gcBytesPerSecond is
	// Config.GCMaxBytesPerSecond.
	gc               *gcState
	gcBytesPerSecond int64
	gcDiscardRatio   float64
	// mapped bounds the resident pages of badger's mapped files (nil:
	// no bound, or in memory).
	mapped *mappedState
	// statsMaxAge is Config.TableStatsMaxAge.
	statsMaxAge time.Duration
	tableStats  tableStatsCache
}

// tableState is the store's in-memory state of one table instance.
type tableState struct {
	// maxTs is, for each series whose figures are known, its highest
	// timestamp and the bound above which the LSM tree holds nothing of
	// it; touched by commit only.
	maxTs map[uint64]seriesMax

	dupMu sync.RWMutex // guards dups
	// head holds the series runs of commits since the last flush
	// (head.go); touched by commit only.
	head tableHead
	// sealed is the head a background flush is storing (nil when
	// none): set and cleared by the writer under Engine.mu, read by the
	// writer and the flush.
	sealed *tableHead

	// dups holds the points holding more than one fragment, each with its
	// point-index entry as last written by this process ("" when it was
	// marked before the process started: read it from the store). The
	// entry may be ahead of a reader's snapshot; references to blocks the
	// reader does not see are skipped, as after a split commit.
	dups map[pointID]string
}

// seriesMax is what the writer knows of a series' times. all is the
// highest time committed (in a stored key or a head). stored bounds the
// times of the series' run keys and point-index entries in the LSM tree,
// written or being written by a head flush: none lies above it. A late
// point above stored (the common one: a write that committed after a
// later one of the same series, both since the last flush) is placed
// from the head alone, without a read of the tree (lookup.go). stored is
// raised when a flush is sealed and when a late point's entry is
// written; a maximum loaded from the store sets it to all.
type seriesMax struct{ all, stored int64 }

type pointID struct {
	sid uint64
	ts  int64
}

// Open opens (creating if needed) the store in cfg.Dir. It returns ErrLocked
// when another process holds the directory, ErrDiskFull when its file system
// has less than cfg.MinFreeBytes free and ErrVersion for a foreign layout.
// logger may be nil (discard); reg may be nil (no metrics).
func Open(cfg Config, logger *slog.Logger, reg prometheus.Registerer) (_ *Engine, err error) {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	db := &Engine{logger: logger.With("component", "store"), tables: map[uint64]*tableState{}, dir: cfg.Dir, freeBytes: freeBytes,
		statsMaxAge: cfg.TableStatsMaxAge, tableStats: tableStatsCache{byTID: map[uint64]store.TableStats{}},
		headMax: max(cfg.HeadMaxEntries, 1), headMaxBytes: max(cfg.HeadMaxBytes, 1),
		headFlushes: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "ingestd_store_head_flushes_total", Help: "Times the head's series runs were stored as run keys (--store-head-max-entries or --store-head-max-bytes reached, a retention sweep, Close).",
		}),
		keysWritten: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "ingestd_store_keys_written_total", Help: "Keys (sets and deletes) commits and head flushes wrote to the LSM tree; divided by ingestd_ilp_lines_total, the LSM writes per line.",
		})}
	opts := badger.DefaultOptions(cfg.Dir).WithValueThreshold(valueThreshold)
	if cfg.InMemory {
		// Without a value log every value lives in the tree, and badger
		// refuses one above the threshold.
		opts = badger.DefaultOptions("").WithInMemory(true).WithValueThreshold(1 << 20)
	} else {
		if err := os.MkdirAll(cfg.Dir, 0o750); err != nil {
			return nil, fmt.Errorf("create data directory: %w", err)
		}
		if db.lock, err = lockDir(cfg.Dir); err != nil {
			return nil, err
		}
		defer func() {
			if err != nil {
				_ = db.lock.Close()
			}
		}()
		db.minFree = cfg.MinFreeBytes
		if err := db.checkSpace(); err != nil {
			return nil, err
		}
		if err := removeEmptyLogs(cfg.Dir, db.logger); err != nil {
			return nil, err
		}
	}
	opts = opts.
		WithSyncWrites(!cfg.UnsafeNoSync).
		WithLogger(badgerLogger{db.logger}).
		WithNumVersionsToKeep(1).
		WithDetectConflicts(false).
		WithNumMemtables(2).
		WithNumCompactors(2).
		WithSerialCompactions(true).
		WithMetricsEnabled(false).
		WithBlockCacheSize(cfg.BlockCacheBytes).
		WithIndexCacheSize(32 << 20).
		WithMemTableSize(cfg.MemTableBytes).
		WithValueLogFileSize(MaxValueBytes).
		WithValueLogMaxEntries(uint32(max(cfg.ValueLogMaxEntries, 1)))
	db.bdb, err = badger.Open(opts)
	if err != nil {
		return nil, fmt.Errorf("open badger in %s: %w", cfg.Dir, err)
	}
	if err := db.load(); err != nil {
		return nil, errors.Join(err, db.bdb.Close())
	}
	if err := db.upgrade(); err != nil {
		return nil, errors.Join(err, db.bdb.Close())
	}
	if err := db.finishDrops(); err != nil {
		return nil, errors.Join(err, db.bdb.Close())
	}
	if err := db.loadHeads(); err != nil {
		return nil, errors.Join(err, db.bdb.Close())
	}
	if !cfg.InMemory {
		db.gc, db.gcBytesPerSecond, db.gcDiscardRatio = newGCState(), cfg.GCMaxBytesPerSecond, cfg.GCDiscardRatio
		if reg != nil {
			reg.MustRegister(db.gc.runs, db.gc.seconds, db.gc.rewrites)
		}
		if cfg.GCInterval > 0 {
			go db.runGC(cfg.GCInterval, cfg.GCMaxBytesPerSecond)
		} else {
			close(db.gc.done)
		}
		if cfg.MaxMappedBytes > 0 {
			db.mapped = newMappedState(cfg.MaxMappedBytes)
			if reg != nil {
				reg.MustRegister(db.mapped.resident, db.mapped.pageOuts)
			}
			go db.runMappedBound(db.mapped)
		}
	}
	if reg != nil {
		reg.MustRegister(sizeCollector{db}, lsmCollector{db}, statsCollector{db}, freeCollector{db}, db.headFlushes, db.keysWritten,
			prometheus.NewGaugeFunc(prometheus.GaugeOpts{
				Name: "ingestd_store_head_entries", Help: "Entries the head holds in memory, one per new point or overwrite (at most twice --store-head-max-entries).",
			}, func() float64 { e, _ := db.headSize(true); return float64(e) }),
			prometheus.NewGaugeFunc(prometheus.GaugeOpts{
				Name: "ingestd_store_head_bytes", Help: "Bytes of head records the head holds in memory (at most about twice --store-head-max-bytes).",
			}, func() float64 { _, b := db.headSize(true); return float64(b) }))
	}
	return db, nil
}

// lockDir takes an exclusive advisory lock on dir/LOCK.ingestd.
func lockDir(dir string) (*os.File, error) {
	f, err := os.OpenFile(filepath.Join(dir, "LOCK.ingestd"), os.O_CREATE|os.O_RDWR, 0o640)
	if err != nil {
		return nil, fmt.Errorf("open lock file: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		_ = f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, fmt.Errorf("%w: %s", store.ErrLocked, dir)
		}
		return nil, fmt.Errorf("lock data directory: %w", err)
	}
	return f, nil
}

// removeEmptyLogs deletes the empty badger write-ahead (.mem) and value log
// (.vlog) files in dir. A crash between badger creating such a file and
// sizing it leaves it empty, and badger.Open then fails with "Create a new
// file" (dgraph-io/badger#2207). An empty log holds no entry, so deleting it
// loses nothing; badger creates a fresh one.
func removeEmptyLogs(dir string, logger *slog.Logger) error {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return fmt.Errorf("read data directory: %w", err)
	}
	for _, e := range entries {
		name := e.Name()
		if !e.Type().IsRegular() || (filepath.Ext(name) != ".mem" && filepath.Ext(name) != ".vlog") {
			continue
		}
		info, err := e.Info()
		if err != nil {
			return fmt.Errorf("read data directory: %w", err)
		}
		if info.Size() != 0 {
			continue
		}
		if err := os.Remove(filepath.Join(dir, name)); err != nil {
			return fmt.Errorf("remove empty log file left by a crash: %w", err)
		}
		logger.Warn("removed an empty badger log file left by a crash", "file", name)
	}
	return nil
}

// freeBytes returns the space available to this process on dir's file
// system.
func freeBytes(dir string) (uint64, error) {
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		return 0, err
	}
	return st.Bavail * uint64(st.Bsize), nil
}

// checkSpace returns ErrDiskFull when the data directory's file system has
// less than MinFreeBytes free. Every write calls it first.
func (db *Engine) checkSpace() error {
	if db.minFree <= 0 {
		return nil
	}
	free, err := db.freeBytes(db.dir)
	if err != nil {
		return fmt.Errorf("store: free space of %s: %w", db.dir, err)
	}
	if free < uint64(db.minFree) {
		return fmt.Errorf("%w: %s has %d bytes free, less than --store-min-free-bytes=%d (free some space, then restart)",
			store.ErrDiskFull, db.dir, free, db.minFree)
	}
	return nil
}

// load checks the layout version and reads the counters and the overwrite
// markers.
func (db *Engine) load() error {
	return db.bdb.Update(func(txn *badger.Txn) error {
		item, err := txn.Get([]byte{ksVersion})
		switch {
		case errors.Is(err, badger.ErrKeyNotFound):
			if err := txn.Set([]byte{ksVersion}, binary.AppendUvarint(nil, layoutVersion)); err != nil {
				return err
			}
		case err != nil:
			return err
		default:
			v, err := item.ValueCopy(nil)
			if err != nil {
				return err
			}
			ver, n := binary.Uvarint(v)
			if n <= 0 || ver < 1 || ver > layoutVersion {
				return fmt.Errorf("%w: %d (this build reads 1..%d)", store.ErrVersion, ver, layoutVersion)
			}
			if ver < layoutVersion {
				db.upgradeFrom = ver // the mark is raised once the entries are converted (upgrade)
			}
		}
		// The floors of the keyspaces look-ups seek backwards in (see
		// keyspaceFloor).
		for _, ks := range []byte{ksRun, ksPoint} {
			for _, k := range [][]byte{{ks}, {ks, 0}} {
				if _, err := txn.Get(k); errors.Is(err, badger.ErrKeyNotFound) {
					if err := txn.Set(k, nil); err != nil {
						return err
					}
				} else if err != nil {
					return err
				}
			}
		}
		switch item, err := txn.Get([]byte{ksNext}); {
		case errors.Is(err, badger.ErrKeyNotFound):
		case err != nil:
			return err
		default:
			v, err := item.ValueCopy(nil)
			if err != nil {
				return err
			}
			db.nextBlock, _ = binary.Uvarint(v)
		}
		it := txn.NewIterator(badger.IteratorOptions{Prefix: []byte{ksDup}})
		defer it.Close()
		for it.Rewind(); it.Valid(); it.Next() {
			k := it.Item().Key()
			if len(k) != 25 {
				return &store.CorruptionError{Key: it.Item().KeyCopy(nil), Err: errShort}
			}
			ts := db.tableLocked(binary.BigEndian.Uint64(k[1:]))
			ts.dups[pointID{binary.BigEndian.Uint64(k[9:]), pointKeyTime(k)}] = "" // entry not read yet
		}
		return nil
	})
}

// finishDrops finishes the removal of every instance marked for it
// (MarkDrop: an instance whose removal the process did not finish).
func (db *Engine) finishDrops() error {
	var marked []uint64
	err := db.bdb.View(func(txn *badger.Txn) error {
		it := txn.NewIterator(badger.IteratorOptions{Prefix: []byte{ksDrop}})
		defer it.Close()
		for it.Rewind(); it.Valid(); it.Next() {
			k := it.Item().Key()
			if len(k) != 9 {
				return &store.CorruptionError{Key: it.Item().KeyCopy(nil), Err: errShort}
			}
			marked = append(marked, binary.BigEndian.Uint64(k[1:]))
		}
		return nil
	})
	if err != nil {
		return err
	}
	for _, tid := range marked {
		if err := db.dropInstance(tid); err != nil {
			return fmt.Errorf("finish removing table instance %d: %w", tid, err)
		}
		db.logger.Info("finished removing a truncated or dropped table instance", "instance", tid)
	}
	return nil
}

// tableLocked returns the state of instance tid, creating it.
// db.mu must be held, or the caller must be the only user (Open).
func (db *Engine) tableLocked(tid uint64) *tableState {
	ts, ok := db.tables[tid]
	if !ok {
		ts = &tableState{maxTs: map[uint64]seriesMax{}, dups: map[pointID]string{}}
		db.tables[tid] = ts
	}
	return ts
}

func (db *Engine) table(tid uint64) *tableState {
	db.mu.Lock()
	defer db.mu.Unlock()
	return db.tableLocked(tid)
}

// loadSeries returns the series dictionary of table instance tid, ordered by
// series id.
func (db *Engine) loadSeries(tid uint64) ([]store.Series, error) {
	var out []store.Series
	err := db.bdb.View(func(txn *badger.Txn) error {
		it := txn.NewIterator(badger.IteratorOptions{Prefix: tablePrefix(ksSeries, tid), PrefetchValues: true})
		defer it.Close()
		for it.Rewind(); it.Valid(); it.Next() {
			item := it.Item()
			var tags []store.Field
			err := item.Value(func(v []byte) (err error) {
				tags, err = decodeSeries(v)
				return err
			})
			if err != nil {
				return &store.CorruptionError{Key: item.KeyCopy(nil), Err: err}
			}
			out = append(out, store.Series{ID: binary.BigEndian.Uint64(item.Key()[9:]), Tags: tags})
		}
		return nil
	})
	return out, err
}

// dropTableData deletes every fragment, series and index entry of table
// instance tid. It blocks writes while it runs (badger DropPrefix).
func (db *Engine) dropTableData(tid uint64) error {
	// A flush in progress may be storing the instance's runs.
	if err := db.reapFlush(true); err != nil {
		return err
	}
	db.mu.Lock()
	delete(db.tables, tid)
	db.mu.Unlock()
	return db.bdb.DropPrefix(tablePrefix(ksSeries, tid), tablePrefix(ksSync, tid),
		tablePrefix(ksUnsync, tid), tablePrefix(ksPoint, tid), tablePrefix(ksRef, tid), tablePrefix(ksOver, tid), tablePrefix(ksDup, tid), tablePrefix(ksRun, tid),
		tablePrefix(ksHead, tid), horizonKey(tid))
}

// commit durably writes the given table commits, after own (the
// owner's keys, Apply): per table, series first, then the point index,
// then the table's block. It returns once everything is fsynced (unless
// UnsafeNoSync). A commit larger than one badger transaction is split
// into several, committed in order; a crash between them leaves a
// prefix: own, whole blocks, each with its index, and perhaps index
// entries naming a block never stored, which Open repairs (split,
// repairTorn; the owner's numbering accounts for the lost numbers).
// It returns ErrDiskFull, having written nothing, when the data directory's
// file system has less than Config.MinFreeBytes free.
func (db *Engine) commit(commits []store.TableCommit, own ...KV) error {
	if err := db.checkSpace(); err != nil {
		return err
	}
	// Before any look-up: a flush that has ended is seen by this
	// commit's view, and its sealed heads go.
	if err := db.reapFlush(false); err != nil {
		return err
	}
	w := &committer{db: db, txn: db.bdb.NewTransaction(true), look: lookup{db: db}, body: db.blockBody, offs: db.blockOffs}
	defer func() {
		w.look.close()
		w.txn.Discard()
		if cap(w.body) <= maxScratchBodyBytes {
			db.blockBody, db.blockOffs = w.body, w.offs
		}
	}()
	for i := range commits {
		w.tids = append(w.tids, commits[i].TableID)
	}
	for _, kv := range own {
		if err := w.set(kv.Key, kv.Value); err != nil {
			return err
		}
	}
	for i := range commits {
		if err := w.table(&commits[i]); err != nil {
			return err
		}
	}
	if w.torn {
		if err := w.txn.Delete([]byte{ksTorn}); err != nil {
			return err
		}
	}
	if err := w.txn.Commit(); err != nil {
		return err
	}
	// Once durable, never before: a reader must not see a union a crash
	// could take back.
	for _, h := range w.heads {
		if err := db.applyHead(h.st, h.key, h.rec, true, fragmentsSource(h.frags)); err != nil {
			return err
		}
	}
	if entries, bytes := db.headSize(false); entries >= db.headMax || bytes >= db.headMaxBytes {
		return db.startFlush()
	}
	return nil
}

// valueThreshold is the size from which badger keeps a value in its
// value log, the LSM tree holding only a pointer: every block but the
// smallest, every head record but the smallest, and table metadata
// beyond a few columns. Kept in the LSM tree, a value is copied into a
// memtable, written again by the memtable's flush and by every
// compaction that moves it down a level, and those flushes and
// compactions take a core for a second at a time: on a 2-core machine
// under a soak of many small commits (one 1,000-line write each, spread
// over nine tables) the blocks below 4 KiB in the tree stalled commits
// for seconds, and with compact blocks and head records (about 1 KiB for
// a commit's 111 points of a table) in the tree below 1.5 KiB, 4 to 5
// windows of 12 missed a p99 of 100 ms where at 512 bytes none did
// (docs/performance.md#sustained-load). The value log's cost is space: a
// flushed head record is garbage in a file of live blocks until that
// file is rewritten (a file at least --store-gc-discard-ratio garbage).
// Run values (a few hundred bytes), point entries and series stay in
// the tree, where a look-up reads them without a value-log read.
const valueThreshold = 512

// maxScratchBodyBytes bounds the block encoder's scratch space kept
// between commits: a block of a 5,000-line TSBS write is about 250 KB, one
// of a group at --feed-max-group-bytes up to 64 MiB, which is not kept.
const maxScratchBodyBytes = 4 << 20

type committer struct {
	db    *Engine
	txn   *badger.Txn
	body  []byte
	offs  []uint64
	look  lookup        // reads of what earlier commits stored (lookup.go)
	union []store.Field // scratch space of extend
	// unions holds the union entries extend makes: one allocation per
	// doubling, not one per overwrite (each is copied into its head
	// record; grown, the old array stays for the entries that alias it).
	unions []byte
	torn   bool         // the commit was split: its mark is written
	tids   []uint64     // the tables the commit writes, for its mark
	heads  []headRecord // the head records written, added to the heads once durable
	// maxKeys, when above 0, splits the transaction every maxKeys keys
	// (flushTxnKeys), keys counting those in the current one.
	maxKeys, keys int
	// flush marks a head flush's committer (storeHeads): each of its
	// transactions counts in Engine.flushGen.
	flush bool
}

// flushTxnKeys bounds a head flush's transactions. Badger applies write
// requests one at a time: a flush committed as one transaction of about
// 100,000 run keys (100,000 series, one head) held every commit behind
// it for 300-700 ms at each flush, every 23 s at 45,000 lines/s. Split
// at this many keys, commits go between a flush's transactions; each
// costs an fsync.
const flushTxnKeys = 2048

// headRecord is a head record a commit wrote, and its block's fragments.
type headRecord struct {
	st       *tableState
	key, rec []byte
	frags    []store.Fragment
}

// set writes k=v, committing and starting a new transaction when the current
// one is full. k and v must not be modified afterwards.
func (w *committer) set(k, v []byte) error { return w.setMeta(k, v, 0) }

// setMeta is set with badger's user meta byte of the key (metaNoFirst).
func (w *committer) setMeta(k, v []byte, meta byte) error {
	if err := w.count(); err != nil {
		return err
	}
	e := badger.NewEntry(k, v).WithMeta(meta)
	err := w.txn.SetEntry(e)
	if errors.Is(err, badger.ErrTxnTooBig) {
		if err := w.split(); err != nil {
			return err
		}
		err = w.txn.SetEntry(badger.NewEntry(k, v).WithMeta(meta))
	}
	return err
}

// count counts a key about to be written, splitting the transaction
// first when it holds w.maxKeys.
func (w *committer) count() error {
	w.db.keysWritten.Inc()
	if w.maxKeys <= 0 {
		return nil
	}
	if w.keys == w.maxKeys {
		if err := w.split(); err != nil {
			return err
		}
	}
	w.keys++
	return nil
}

// split commits the transaction so far and starts the next one. The first
// split of a commit that writes tables (w.tids) durably marks it torn
// first ('w': the tables' ids), and its last transaction deletes the mark:
// Open repairs what a crash between them leaves (repairTorn).
func (w *committer) split() error {
	if !w.torn && len(w.tids) > 0 {
		var v []byte
		for _, tid := range w.tids {
			v = binary.AppendUvarint(v, tid)
		}
		if err := w.db.bdb.Update(func(txn *badger.Txn) error { return txn.Set([]byte{ksTorn}, v) }); err != nil {
			return err
		}
		w.torn = true
	}
	if err := w.txn.Commit(); err != nil {
		return err
	}
	if w.flush {
		w.db.flushGen.Add(1)
	}
	w.txn = w.db.bdb.NewTransaction(true)
	w.keys = 0
	return nil
}

func (w *committer) table(tc *store.TableCommit) error {
	st := w.db.table(tc.TableID)
	w.look.table(tc.TableID, st)
	for _, s := range tc.NewSeries {
		if err := w.set(tableKey(ksSeries, tc.TableID, s.ID), appendSeries(nil, s.Tags)); err != nil {
			return err
		}
		if _, known := st.maxTs[s.ID]; !known { // Apply may repeat a series (store/jsstore's dictionary snapshots)
			st.maxTs[s.ID] = seriesMax{math.MinInt64, math.MinInt64}
		}
	}
	if len(tc.Fragments) == 0 {
		return nil
	}
	var block []byte
	block, w.body, w.offs = appendBlock(nil, tc.FirstSeq, tc.CommitTime, tc.Fragments, w.body, w.offs)
	var key []byte
	blockNo := w.db.nextBlock
	if tc.FirstSeq != 0 {
		key = tableKey(ksSync, tc.TableID, tc.FirstSeq+uint64(len(tc.Fragments))-1)
	} else {
		// The block number is durable before anything refers to it.
		key = tableKey(ksUnsync, tc.TableID, blockNo)
		w.db.nextBlock++
		if err := w.set([]byte{ksNext}, binary.AppendUvarint(nil, w.db.nextBlock)); err != nil {
			return err
		}
	}
	return w.index(st, tc, blockNo, key, block)
}

// index writes the block's series runs and point index (see doc.go), then
// the block itself: a fragment whose time is above its series' highest
// stored time is new and joins the series' run for this block; any other is
// looked up and gets a point-index entry: a reference when it is the
// point's only fragment, else the point's union (its current row) with a
// reference entry for the fragment and, the first time, an overwrite
// marker. The block comes last: when a crash separates the transactions
// of a split commit, a stored block's fragments always have their runs,
// entries and overwrite markers (else a drain would deliver such a
// fragment without the columns written before it at its point); Open
// repairs the unions that name fragments of a block never stored
// (repairTorn).
func (w *committer) index(st *tableState, tc *store.TableCommit, blockNo uint64, key, block []byte) error {
	refOf := func(i int) ref {
		if tc.FirstSeq != 0 {
			return ref{seq: tc.FirstSeq + uint64(i)}
		}
		return ref{block: blockNo, idx: uint64(i)}
	}
	// local returns the fragment of this block r names, if it does.
	local := func(r ref) *store.Fragment {
		switch {
		case tc.FirstSeq != 0 && r.seq >= tc.FirstSeq && r.seq-tc.FirstSeq < uint64(len(tc.Fragments)):
			return &tc.Fragments[r.seq-tc.FirstSeq]
		case tc.FirstSeq == 0 && r.seq == 0 && r.block == blockNo && r.idx < uint64(len(tc.Fragments)):
			return &tc.Fragments[r.idx]
		}
		return nil
	}
	// Room in each run for the fragments of a series when the block's are
	// spread evenly over the table's series: one allocation for a run of
	// an in-order load instead of one per doubling (at most 256: 4 KiB),
	// and none for a block of one point per series, the load of many
	// agents each writing its series every interval.
	hint := min(max(len(tc.Fragments)/max(len(st.maxTs), 1), 1), 256)
	// At most a run per fragment or per series, and the fragments'
	// room: a block of 500 points of 10 series needs 10 runs of 50.
	nRuns := min(len(tc.Fragments), len(st.maxTs)+1, 4096)
	arena := newArena(nRuns, len(tc.Fragments)+hint)
	runs := make(map[uint64]*runBuilder, nRuns)
	var order []*runBuilder        // every run of the block: in-order and gap runs
	gaps := map[uint64][]*gapRun{} // by series, the gap runs of this block
	type late struct {
		i     int
		entry []byte
		count uint64 // fragments at the point with this one
	}
	var lates []late
	// The entries of this block's late points so far: placed in order,
	// and by point in pending, which is made only when a late point of a
	// series is at or below one placed before it (a point written twice
	// in the block): a pass over points in time order needs no map.
	type placement struct {
		i     int
		entry []byte
	}
	var placed []placement
	var pending map[pointID][]byte
	lateMax := map[uint64]int64{} // by series, the highest time placed
	place := func(i int, entry []byte) {
		f := &tc.Fragments[i]
		if pending != nil {
			pending[pointID{f.Series, f.Time}] = entry
			return
		}
		placed = append(placed, placement{i, entry})
		if hi, ok := lateMax[f.Series]; !ok || f.Time > hi {
			lateMax[f.Series] = f.Time
		}
	}
	placedBefore := func(f *store.Fragment) ([]byte, bool) {
		if pending == nil {
			if hi, ok := lateMax[f.Series]; !ok || f.Time > hi {
				return nil, false
			}
			pending = make(map[pointID][]byte, len(placed))
			for _, p := range placed {
				pf := &tc.Fragments[p.i]
				pending[pointID{pf.Series, pf.Time}] = p.entry
			}
		}
		e, ok := pending[pointID{f.Series, f.Time}]
		return e, ok
	}
	write := 0 // the write of fragment i: tc.Writes[write-1] <= i < tc.Writes[write]
	for i := range tc.Fragments {
		for write < len(tc.Writes) && tc.Writes[write] <= i {
			write++
		}
		f := &tc.Fragments[i]
		m, err := w.maxTs(st, f.Series)
		if err != nil {
			return err
		}
		if f.Time > m.all {
			m.all = f.Time
			st.maxTs[f.Series] = m
			first := runs[f.Series]
			switch {
			case first == nil:
				first = arena.run(f.Series, f.Time, write, hint)
				first.last = first
				runs[f.Series] = first
				order = append(order, first)
			case first.last.write != write:
				rb := arena.run(f.Series, f.Time, write, 1)
				first.last.next, first.last = rb, rb
				order = append(order, rb)
			}
			first.last.add(f.Time, uint64(i))
			continue
		}
		old, ok := placedBefore(f)
		if !ok {
			// An overwritten point's entry as this process last made it
			// durable: no look-up (the writer is the only one to change it).
			if entry, dup := st.dupRefs(f.Series, f.Time); dup && entry != "" {
				// Read only (extend decodes it): the string's bytes, not a copy.
				old, ok = unsafe.Slice(unsafe.StringData(entry), len(entry)), true
			}
		}
		if !ok {
			g, err := w.gapFor(gaps, runs[f.Series], f)
			if err != nil {
				return err
			}
			if g != nil {
				if g.rb == nil || g.rb.write != write {
					// one run per write, as in-order runs
					g.rb = arena.run(f.Series, f.Time, write, 1)
					g.rb.gap = true
					order = append(order, g.rb)
				}
				g.rb.add(f.Time, uint64(i))
				place(i, appendRef(nil, refOf(i)))
				continue
			}
			if old, err = w.existing(f, runs[f.Series], refOf); err != nil {
				return err
			}
		}
		entry, count, err := w.extend(tc.TableID, old, refOf(i), f, local)
		if err != nil {
			return err
		}
		lates = append(lates, late{i, entry, count})
		place(i, entry)
	}
	base := tc.FirstSeq
	kind := byte('L')
	if tc.FirstSeq == 0 {
		base, kind = blockNo, 'U'
	}
	// The late points: a new one gets its point-index entry now; a
	// fragment that overwrote a point (its second or later) goes to the
	// head record with the point's entry, which the head keeps until a
	// flush stores it (head.go).
	hasFirst := len(order) > 0
	overs := map[uint64][]overwrite{}
	var overSids []uint64
	keys := make([]byte, 0, 25*len(lates)) // one allocation holds the point keys
	for _, l := range lates {
		f := &tc.Fragments[l.i]
		if l.count < 2 {
			hasFirst = true
			keys = pointKey(keys, ksPoint, tc.TableID, f.Series, f.Time)
			pk := keys[len(keys)-25 : len(keys) : len(keys)]
			keys = keys[len(keys):]
			if err := w.set(pk, l.entry); err != nil {
				return err
			}
			if m := st.maxTs[f.Series]; f.Time > m.stored {
				m.stored = f.Time
				st.maxTs[f.Series] = m
			}
			continue
		}
		if _, ok := overs[f.Series]; !ok {
			overSids = append(overSids, f.Series)
		}
		overs[f.Series] = append(overs[f.Series], overwrite{ts: f.Time, idx: uint64(l.i), entry: l.entry})
	}
	if len(order) > 0 || len(overSids) > 0 {
		// The block's runs and overwrites, as one head record (head.go).
		hw := newHeadWriter(kind, base)
		for _, rb := range order {
			flags := byte(0)
			if !rb.gap {
				flags = headInOrder
				first := runs[rb.sid] // keeps the series' top as the record leaves it
				if !first.hasTop {
					first.top = st.head.topOf(rb.sid)
					// A gap run of this block may lie between the head's
					// last run and this one: joining them would make a run
					// that spans it.
					first.top.open = first.top.open && len(gaps[rb.sid]) == 0
					first.hasTop = true
				}
				var joined bool
				if first.top, joined = first.top.join(kind, rb); joined {
					flags |= headJoins
				}
			}
			hw.appendRun(rb, flags)
		}
		for _, sid := range overSids {
			ows := overs[sid]
			slices.SortFunc(ows, func(a, b overwrite) int { return cmp.Or(cmp.Compare(a.ts, b.ts), cmp.Compare(a.idx, b.idx)) })
			hw.appendOver(sid, ows)
		}
		rec := hw.rec
		k := headKey(tc.TableID, w.db.headSeq)
		w.db.headSeq++
		if err := w.set(k, rec); err != nil {
			return err
		}
		w.heads = append(w.heads, headRecord{st, k, rec, tc.Fragments})
	}
	if !hasFirst {
		return w.setMeta(key, block, metaNoFirst)
	}
	return w.set(key, block)
}

// extend returns the point-index entry of f's point once f (named r) is
// added to what old (the point's entry so far, nil when the point is new)
// holds, and the number of fragments it then holds. A point's second
// fragment makes the entry a union: the first fragment's fields are taken
// from the block being written (local) or fetched from its stored block,
// once; every later one merges into the union as it is. A first fragment
// whose block was never stored (a crash split its commit) does not count.
func (w *committer) extend(tid uint64, old []byte, r ref, f *store.Fragment, local func(ref) *store.Fragment) ([]byte, uint64, error) {
	if old == nil {
		return appendRef(nil, r), 1, nil
	}
	e, err := decodeEntry(old, w.union[:0])
	if err != nil {
		return nil, 0, &store.CorruptionError{Key: pointKey(nil, ksPoint, tid, f.Series, f.Time), Err: err}
	}
	fields := e.fields
	if e.count == 1 || fields == nil {
		lf := local(e.first)
		if lf == nil {
			var stored store.Fragment
			found, err := w.look.fragment(e.first, &stored)
			if err != nil {
				return nil, 0, err
			}
			if !found {
				return appendRef(nil, r), 1, nil
			}
			lf = &stored
		}
		fields = append(w.union[:0], lf.Fields...)
	}
	fields = mergeFields(fields, f.Fields)
	w.union = fields[:0]
	start := len(w.unions)
	w.unions = appendUnion(w.unions, e.count+1, e.first, f.Series, f.Time, fields)
	return w.unions[start:len(w.unions):len(w.unions)], e.count + 1, nil
}

// maxTs returns a series' highest times (seriesMax), looking them up
// once per process.
func (w *committer) maxTs(st *tableState, sid uint64) (seriesMax, error) {
	if m, ok := st.maxTs[sid]; ok {
		return m, nil
	}
	hi, err := w.look.maxTs(sid)
	if err != nil {
		return seriesMax{}, err
	}
	// Whatever the store and the heads hold may lie in the tree by the
	// time it is next read (a flush may be storing the sealed head).
	m := seriesMax{hi, hi}
	st.maxTs[sid] = m
	return m, nil
}

// maxGapRuns bounds the gaps of one series in one block (a gap costs
// three seeks to find; a point placed in one of them a binary search):
// late points scattered over more gaps than this (random backfill) are
// indexed. A group commit of many concurrent writes holds a run per
// write, each in a gap of its own when the writes that precede it in the
// stream are still in flight, hence a bound well above the writers of a
// typical load.
const maxGapRuns = 64

// gapRun is a run of new late points of one series in the block being
// written: all in (lo, hi), an interval where earlier commits stored no
// fragment of the series (lookup.gap), in strictly ascending time.
type gapRun struct {
	lo, hi int64
	rb     *runBuilder // the run of the latest write in the gap; nil until its first point
}

// gapFor returns the gap run of f's series that f, a late point not placed
// earlier in this block, joins as a new point, or nil when f must be
// looked up (existing) and indexed. f must lie below the series' in-order
// run of this block (cur; none of whose times is then at or below f's).
// When f's time lies in the interval of one of the series' gap runs of
// this block, f joins that run if it is above the run's last time, else
// it is indexed; otherwise a gap is looked up, and f starts a run in it
// when there is one. Runs stay disjoint: a gap holds no stored run, two
// gaps of one series are disjoint or the same (and the same gap has one
// run per write of the block, ascending), and the in-order points of a block lie above every gap
// found before them.
func (w *committer) gapFor(gaps map[uint64][]*gapRun, cur *runBuilder, f *store.Fragment) (*gapRun, error) {
	t := f.Time
	if cur != nil && t >= cur.firstTs {
		return nil, nil
	}
	gs := gaps[f.Series] // disjoint, by ascending lo
	i := sort.Search(len(gs), func(i int) bool { return gs[i].lo >= t })
	if i > 0 && t < gs[i-1].hi {
		g := gs[i-1]
		if g.rb != nil && t <= g.rb.ts[len(g.rb.ts)-1] {
			return nil, nil // not ascending: indexed instead
		}
		return g, nil
	}
	if len(gs) == maxGapRuns {
		return nil, nil
	}
	lo, hi, ok, err := w.look.gap(f.Series, t)
	if err != nil || !ok {
		return nil, err
	}
	g := &gapRun{lo: lo, hi: hi}
	gaps[f.Series] = slices.Insert(gs, i, g)
	return g, nil
}

// existing returns the point-index entry of f's point as stored by
// earlier commits (nil when the point holds nothing): the stored entry
// when there is one, else a reference to the fragment of a series run
// holding f's time (cur is the series' run in the block being written).
// At most one get and one seek (lookup.go). An overwritten point whose
// entry this process keeps in memory is not looked up (index).
func (w *committer) existing(f *store.Fragment, cur *runBuilder, refOf func(int) ref) ([]byte, error) {
	old, err := w.look.point(f.Series, f.Time)
	if err != nil || old != nil {
		return old, err
	}
	if cur != nil {
		if i, ok := cur.find(f.Time); ok {
			return appendRef(nil, refOf(int(i))), nil
		}
	}
	r, ok, err := w.look.run(f.Series, f.Time)
	if err != nil || !ok {
		return nil, err
	}
	return appendRef(nil, r), nil
}

// badgerLogger routes badger's logs to slog at one level lower than badger
// claims (badger is chatty at Info).
type badgerLogger struct{ l *slog.Logger }

func (b badgerLogger) Errorf(f string, a ...any)   { b.l.Error("badger", "msg", fmt.Sprintf(f, a...)) }
func (b badgerLogger) Warningf(f string, a ...any) { b.l.Warn("badger", "msg", fmt.Sprintf(f, a...)) }
func (b badgerLogger) Infof(f string, a ...any)    { b.l.Debug("badger", "msg", fmt.Sprintf(f, a...)) }
func (b badgerLogger) Debugf(f string, a ...any)   {}
