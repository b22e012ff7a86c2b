package feed

import (
	"errors"
	"flag"
	"fmt"
	"path"
	"strings"
	"time"

	"github.com/ingestd/ingestd/store"
)

// Default values of Config.
const (
	DefaultQueueLength        = 256
	DefaultMaxGroupPoints     = 100_000
	DefaultMaxColumnsPerTable = 1024
	DefaultMaxSeriesPerTable  = 1_000_000
	DefaultMaxSeriesBytes     = 256 << 20
	DefaultMaxSchemaBytes     = 64 << 20
	// DefaultMaxWaitingDrains is a quarter of the HTTP server's default
	// --http-max-conns (4096).
	DefaultMaxWaitingDrains = 1024
	DefaultMaxTables        = 10_000
	DefaultMaxDrainLimit    = 10_000
	DefaultSubmitTimeout    = 5 * time.Second
	DefaultMaxConsumers     = 64
	// DefaultMaxConsumersPerToken is the default Config.MaxConsumersPerToken.
	DefaultMaxConsumersPerToken = 1_000
	// DefaultMaxConsumersTotal is the default Config.MaxConsumers.
	DefaultMaxConsumersTotal = 10_000
	// DefaultConsumerIdleExpiry is the default Config.ConsumerIdleExpiry
	// (Kafka's offsets.retention.minutes: 7 days).
	DefaultConsumerIdleExpiry = 7 * 24 * time.Hour
	// DefaultMaxConsumerNameBytes is the default Config.MaxConsumerNameBytes.
	DefaultMaxConsumerNameBytes = 256
	// DefaultMetricsMaxTables and DefaultMetricsMaxConsumers are the
	// defaults of Config.MetricsMaxTables and MetricsMaxConsumers.
	DefaultMetricsMaxTables    = 100
	DefaultMetricsMaxConsumers = 100
	DefaultConsumerFlush       = time.Second
	DefaultMaxTombstones       = 10_000
	DefaultMaxGroupBytes       = 64 << 20
	// DefaultSweepInterval is how often retention and history trimming
	// look for work.
	DefaultSweepInterval = 10 * time.Second
	// DefaultSweepBatchFragments bounds what one sweep batch removes.
	DefaultSweepBatchFragments = 10_000
	// DefaultConsumerHoldMaxAge bounds how long a silent consumer holds
	// the history horizon.
	DefaultConsumerHoldMaxAge = 24 * time.Hour
)

// Config configures the sequencer and the drain.
type Config struct {
	// SyncTables are globs (path.Match syntax); a table auto-created by a
	// write whose name matches one starts with sync ON.
	SyncTables []string
	// QueueLength is how many batches may wait for the sequencer; a full
	// queue blocks Submit (back-pressure).
	QueueLength int
	// MaxGroupPoints caps the points of one group commit.
	MaxGroupPoints int
	// MaxGroupBytes caps the encoded bytes of one group commit's fragments
	// (store.FragmentBytes): a group reaching it is committed and the next
	// starts, also within one batch. It keeps every table's block below
	// the store's store.Limits.MaxBlockBytes whatever clients send (Open
	// refuses a larger one): at most it, plus one fragment.
	MaxGroupBytes int
	// MaxColumnsPerTable caps a table's columns (tags plus fields, time
	// excluded); a line that would add more is rejected.
	MaxColumnsPerTable int
	// MaxTables caps the number of tables; a line or CREATE TABLE that
	// would add one more is rejected (ErrTableLimit).
	MaxTables int
	// MaxSeriesPerTable caps a table's series (distinct tag sets); a line
	// that would add more is rejected.
	MaxSeriesPerTable int
	// MaxSeriesBytes caps the bytes the series dictionaries of every
	// table hold in memory together (seriesCost: each series' key and tag
	// values and their overhead); a line that would add a series past it
	// is rejected (ErrSeriesLimit). Series loaded at start or written by
	// another process are counted, never refused.
	MaxSeriesBytes int
	// MaxSchemaBytes caps the bytes the schemas of every table hold in
	// memory together (columnCost: each column's name and its overhead);
	// a line, CREATE TABLE or table definition that would add a column
	// past it is rejected (ErrColumnLimit). Columns loaded at start or
	// added by another process are counted, never refused.
	MaxSchemaBytes int
	// MaxDrainLimit is the largest drain page.
	MaxDrainLimit int
	// MaxDrainFilters bounds a drain's tag and has conditions together;
	// MaxDrainFilterValues the values of one tag's IN list;
	// MaxDrainFilterValueBytes each tag key, tag value and has name, in
	// bytes (docs/security.md#drain-filters).
	MaxDrainFilters          int
	MaxDrainFilterValues     int
	MaxDrainFilterValueBytes int
	// MaxDrainScan bounds the fragments one filtered drain examines,
	// returned or not: past it the page ends, maybe empty, with Next
	// advanced over what was examined (Page.ScanLimited).
	MaxDrainScan int
	// MaxWaitingDrains caps the long-poll drains (Wait > 0) waiting at
	// once; one past it is answered at once, as with Wait 0 (an empty
	// page keeps the cursor), so long-polls cannot hold every connection
	// the server allows.
	MaxWaitingDrains int
	// SubmitTimeout bounds how long an HTTP write waits for room in the
	// queue before it is answered 503.
	SubmitTimeout time.Duration
	// MaxConsumersPerTable bounds the named consumers one principal (a
	// token; every client without access control) holds on one table, so
	// that no token can take another's room on a table.
	MaxConsumersPerTable int
	// MaxConsumersPerToken bounds the named consumers one principal holds
	// over every table.
	MaxConsumersPerToken int
	// MaxConsumers bounds the named consumers of the server.
	MaxConsumers int
	// ConsumerIdleExpiry removes a named consumer not seen (not drained)
	// for this long, durably, at the next sweep (every SweepInterval).
	// 0 keeps consumers until they are deleted.
	ConsumerIdleExpiry time.Duration
	// MaxConsumerNameBytes is the longest consumer name in bytes (at most
	// MaxNameBytes applies too).
	MaxConsumerNameBytes int
	// MetricsMaxTables is how many sync tables /metrics labels (those with
	// the highest seq), and how many tables its retention figures label
	// (those with the most rows removed); the others are summed in one
	// series labelled table="". MetricsMaxConsumers is the same for named consumers (the
	// laggiest, in fragments). 0 labels none.
	MetricsMaxTables    int
	MetricsMaxConsumers int
	// MaxTombstones bounds the tombstones dropped tables leave (docs/contract.md#epochs:
	// a re-created table resumes above the dropped one's epoch and x_seq).
	// Past it the tombstone with the lowest sequence is folded into one
	// durable floor that every table created without a tombstone starts
	// above, so the guarantee holds for every name while memory and
	// metadata stay bounded. 0 keeps none: every DROP folds into the floor.
	MaxTombstones int
	// MaxNameBytes is the longest table, measurement, tag key, field key or
	// consumer name in bytes (docs/contract.md#names), 1..MaxNameBytesCeiling; a longer
	// name is refused (CheckName).
	MaxNameBytes int
	// MaxStringBytes is the longest tag value or string field in bytes
	// (CheckTagValue, CheckFieldValue): cmd/ingestd sets it to
	// --ilp-max-string-bytes, so that every write path refuses what ILP
	// refuses. 0: DefaultMaxStringBytes.
	MaxStringBytes int
	// ConsumerFlushInterval is how often changed consumer positions are
	// written durably (and at shutdown). A crash may lose at most this much
	// of their progress; positions only feed lag metrics and listings.
	ConsumerFlushInterval time.Duration
	// DefaultRetention is the retention of every table that has none of
	// its own (docs/contract.md#retention): rows whose time is older than now minus it are
	// removed in the background, and writes older than it are refused.
	// 0 keeps rows forever.
	DefaultRetention time.Duration
	// SweepInterval is how often the sweeper looks for aged rows and
	// history to trim; while a table has more, batches follow at once,
	// interleaved with writes.
	SweepInterval time.Duration
	// SweepBatchFragments bounds one sweep batch: the fragments it removes
	// (plus at most the fragments of one point), or the blocks it looks at
	// to trim history. A batch runs in the sequencer between group
	// commits, so it bounds how long writes wait for it.
	SweepBatchFragments int
	// FeedHistory is how long a committed fragment stays drainable
	// (docs/contract.md#horizon): the history horizon rises above fragments committed
	// longer ago. 0: no age limit.
	FeedHistory time.Duration
	// FeedHistoryFragments is how many x_seq numbers below the watermark
	// stay drainable (gaps included): the horizon rises to watermark -
	// FeedHistoryFragments + 1. 0: no count limit.
	FeedHistoryFragments uint64
	// ConsumerHoldsHistory makes every named consumer hold the history
	// horizon at its acknowledged position + 1 (in the table's current
	// epoch), until it was last seen more than ConsumerHoldMaxAge ago.
	// Retention is not held: aged rows go whoever has not read them.
	ConsumerHoldsHistory bool
	// ConsumerHoldMaxAge bounds a hold, so that a dead consumer cannot
	// keep history forever.
	ConsumerHoldMaxAge time.Duration
}

// DefaultConfig returns the defaults.
func DefaultConfig() Config {
	return Config{
		QueueLength:        DefaultQueueLength,
		MaxGroupPoints:     DefaultMaxGroupPoints,
		MaxGroupBytes:      DefaultMaxGroupBytes,
		MaxColumnsPerTable: DefaultMaxColumnsPerTable,
		MaxSeriesPerTable:  DefaultMaxSeriesPerTable,
		MaxSeriesBytes:     DefaultMaxSeriesBytes,
		MaxSchemaBytes:     DefaultMaxSchemaBytes,
		MaxTables:          DefaultMaxTables,
		MaxDrainLimit:      DefaultMaxDrainLimit,
		SubmitTimeout:      DefaultSubmitTimeout,
		MaxNameBytes:       DefaultMaxNameBytes,
		MaxStringBytes:     DefaultMaxStringBytes,
		MaxTombstones:      DefaultMaxTombstones,

		MaxDrainFilters:          DefaultMaxDrainFilters,
		MaxDrainFilterValues:     DefaultMaxDrainFilterValues,
		MaxDrainFilterValueBytes: DefaultMaxDrainFilterValueBytes,
		MaxDrainScan:             DefaultMaxDrainScan,
		MaxWaitingDrains:         DefaultMaxWaitingDrains,

		MaxConsumersPerTable:  DefaultMaxConsumers,
		MaxConsumersPerToken:  DefaultMaxConsumersPerToken,
		MaxConsumers:          DefaultMaxConsumersTotal,
		ConsumerIdleExpiry:    DefaultConsumerIdleExpiry,
		MaxConsumerNameBytes:  DefaultMaxConsumerNameBytes,
		MetricsMaxTables:      DefaultMetricsMaxTables,
		MetricsMaxConsumers:   DefaultMetricsMaxConsumers,
		ConsumerFlushInterval: DefaultConsumerFlush,

		SweepInterval:       DefaultSweepInterval,
		SweepBatchFragments: DefaultSweepBatchFragments,
		ConsumerHoldMaxAge:  DefaultConsumerHoldMaxAge,
	}
}

// globList is a flag.Value of comma-separated globs.
type globList struct{ dst *[]string }

func (g globList) String() string {
	if g.dst == nil {
		return ""
	}
	return strings.Join(*g.dst, ",")
}

func (g globList) Set(s string) error {
	*g.dst = (*g.dst)[:0]
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			*g.dst = append(*g.dst, p)
		}
	}
	return nil
}

// RegisterFlags registers the feed's flags on fs.
func (c *Config) RegisterFlags(fs *flag.FlagSet) {
	fs.Var(globList{&c.SyncTables}, "sync-tables", "comma-separated globs: tables auto-created by a write whose name matches start WITH SYNC")
	fs.IntVar(&c.MaxDrainLimit, "max-drain-limit", c.MaxDrainLimit, "largest drain page in rows")
	fs.IntVar(&c.MaxDrainFilters, "max-drain-filters", c.MaxDrainFilters, "most tag and has conditions of one drain (400 filter_limit past it)")
	fs.IntVar(&c.MaxDrainFilterValues, "max-drain-filter-values", c.MaxDrainFilterValues, "most values in one tag's in: list of a drain (400 filter_limit past it)")
	fs.IntVar(&c.MaxDrainFilterValueBytes, "max-drain-filter-value-bytes", c.MaxDrainFilterValueBytes, "longest tag key, tag value or has name of a drain filter, in bytes (400 filter_limit past it)")
	fs.IntVar(&c.MaxWaitingDrains, "max-waiting-drains", c.MaxWaitingDrains, "most long-poll drains (wait > 0) waiting at once; one past it is answered at once, as with wait=0")
	fs.IntVar(&c.MaxDrainScan, "max-drain-scan", c.MaxDrainScan, "most fragments one filtered drain examines; past it the page ends, maybe empty, its next advanced (scan_limited)")
	fs.IntVar(&c.QueueLength, "feed-queue-length", c.QueueLength, "batches that may wait for the sequencer before writers block")
	fs.IntVar(&c.MaxGroupPoints, "feed-max-group-points", c.MaxGroupPoints, "most points in one group commit")
	fs.IntVar(&c.MaxGroupBytes, "feed-max-group-bytes", c.MaxGroupBytes, "most encoded bytes of fragments in one group commit (with one point more, at most what the store holds in a block: 128 MiB with badger)")
	fs.IntVar(&c.MaxColumnsPerTable, "feed-max-columns-per-table", c.MaxColumnsPerTable, "most columns (tags plus fields) per table")
	fs.IntVar(&c.MaxSeriesPerTable, "feed-max-series-per-table", c.MaxSeriesPerTable, "most series (distinct tag sets) per table")
	fs.IntVar(&c.MaxSeriesBytes, "feed-max-series-bytes", c.MaxSeriesBytes, "most bytes the series dictionaries of all tables hold in memory (each series' tag set and about 100 bytes); a line that would add a series past it is rejected")
	fs.IntVar(&c.MaxSchemaBytes, "feed-max-schema-bytes", c.MaxSchemaBytes, "most bytes the schemas of all tables hold in memory (each column's name and about 128 bytes); a line or table definition that would add a column past it is rejected")
	fs.IntVar(&c.MaxTables, "feed-max-tables", c.MaxTables, "most tables; a write or CREATE TABLE that would add one more is rejected")
	fs.DurationVar(&c.SubmitTimeout, "feed-submit-timeout", c.SubmitTimeout, "how long an HTTP write waits for room in the sequencer queue before 503")
	fs.IntVar(&c.MaxConsumersPerTable, "max-consumers-per-table", c.MaxConsumersPerTable, "most named drain consumers one token (all clients, without --auth-file) holds on one table (409 too_many_consumers past it)")
	fs.IntVar(&c.MaxConsumersPerToken, "max-consumers-per-token", c.MaxConsumersPerToken, "most named drain consumers one token (all clients, without --auth-file) holds over all tables (409 too_many_consumers past it)")
	fs.IntVar(&c.MaxConsumers, "max-consumers", c.MaxConsumers, "most named drain consumers of the server (409 too_many_consumers past it)")
	fs.DurationVar(&c.ConsumerIdleExpiry, "consumer-idle-expiry", c.ConsumerIdleExpiry, "remove a named consumer that has not drained for this long (0: never)")
	fs.IntVar(&c.MaxConsumerNameBytes, "max-consumer-name-bytes", c.MaxConsumerNameBytes, "longest consumer name in bytes (400 invalid_name past it)")
	fs.IntVar(&c.MetricsMaxTables, "metrics-max-tables", c.MetricsMaxTables, "tables /metrics labels: sync tables by highest seq, retention figures by most rows removed; the others are summed in one table=\"\" series (0: none labelled)")
	fs.IntVar(&c.MetricsMaxConsumers, "metrics-max-consumers", c.MetricsMaxConsumers, "named consumers /metrics labels, laggiest first; the others are summed in one consumer=\"\" series (0: none labelled)")
	fs.IntVar(&c.MaxTombstones, "feed-max-tombstones", c.MaxTombstones, "most dropped tables remembered by name; past it the oldest fold into one floor new tables start above (0: none)")
	fs.IntVar(&c.MaxNameBytes, "max-name-bytes", c.MaxNameBytes, "longest table, measurement, tag key, field key or consumer name in bytes (at most 32000, so that every storage key fits)")
	fs.DurationVar(&c.ConsumerFlushInterval, "feed-consumer-flush-interval", c.ConsumerFlushInterval, "how often changed consumer positions are written durably")
	fs.Var(retentionFlag{&c.DefaultRetention}, "default-retention", "retention of tables without their own: rows older than now minus it are removed and writes older than it refused (e.g. 30d, 12h; 0: keep forever)")
	fs.DurationVar(&c.SweepInterval, "retention-sweep-interval", c.SweepInterval, "how often the sweeper looks for aged rows and feed history to trim")
	fs.IntVar(&c.SweepBatchFragments, "retention-batch-size", c.SweepBatchFragments, "most fragments one sweep batch removes (one batch holds the sequencer)")
	fs.Var(retentionFlag{&c.FeedHistory}, "feed-history", "how long a committed fragment stays drainable; older ones fall below the history horizon (0: no age limit)")
	fs.Uint64Var(&c.FeedHistoryFragments, "feed-history-fragments", c.FeedHistoryFragments, "how many x_seq numbers below the watermark stay drainable (0: no count limit)")
	fs.BoolVar(&c.ConsumerHoldsHistory, "consumer-holds-history", c.ConsumerHoldsHistory, "named consumers hold the feed's history horizon at their position, for at most --consumer-hold-max-age after they were last seen")
	fs.DurationVar(&c.ConsumerHoldMaxAge, "consumer-hold-max-age", c.ConsumerHoldMaxAge, "how long after it was last seen a named consumer still holds the history horizon")
}

// retentionFlag is a flag.Value of a retention (ParseRetention syntax).
type retentionFlag struct{ dst *time.Duration }

func (f retentionFlag) String() string {
	if f.dst == nil {
		return "0"
	}
	return FormatRetention(*f.dst)
}

func (f retentionFlag) Set(s string) error {
	d, err := ParseRetention(s)
	if err != nil {
		return err
	}
	*f.dst = d
	return nil
}

// Validate reports the first invalid setting.
func (c *Config) Validate() error {
	for _, g := range c.SyncTables {
		if _, err := path.Match(g, ""); err != nil {
			return errors.New("feed: --sync-tables: bad glob " + g)
		}
	}
	switch {
	case c.QueueLength < 1:
		return errors.New("feed: --feed-queue-length must be at least 1")
	case c.MaxGroupPoints < 1:
		return errors.New("feed: --feed-max-group-points must be at least 1")
	case c.MaxGroupBytes < 1:
		return errors.New("feed: --feed-max-group-bytes must be at least 1")
	case c.MaxColumnsPerTable < 1:
		return errors.New("feed: --feed-max-columns-per-table must be at least 1")
	case c.MaxTables < 1:
		return errors.New("feed: --feed-max-tables must be at least 1")
	case c.MaxSeriesPerTable < 1:
		return errors.New("feed: --feed-max-series-per-table must be at least 1")
	case c.MaxSchemaBytes < 1:
		return errors.New("feed: --feed-max-schema-bytes must be at least 1")
	case c.MaxSeriesBytes < 1:
		return errors.New("feed: --feed-max-series-bytes must be at least 1")
	case c.MaxDrainLimit < 1:
		return errors.New("feed: --max-drain-limit must be at least 1")
	case c.MaxDrainFilters < 1 || c.MaxDrainFilterValues < 1 || c.MaxDrainFilterValueBytes < 1:
		return errors.New("feed: --max-drain-filters, --max-drain-filter-values and --max-drain-filter-value-bytes must be at least 1")
	case c.MaxWaitingDrains < 1:
		return errors.New("feed: --max-waiting-drains must be at least 1")
	case c.MaxDrainScan < c.MaxDrainLimit:
		return errors.New("feed: --max-drain-scan must be at least --max-drain-limit")
	case c.SubmitTimeout <= 0:
		return errors.New("feed: --feed-submit-timeout must be positive")
	case c.MaxConsumersPerTable < 1:
		return errors.New("feed: --max-consumers-per-table must be at least 1")
	case c.MaxConsumersPerToken < 1:
		return errors.New("feed: --max-consumers-per-token must be at least 1")
	case c.MaxConsumers < 1:
		return errors.New("feed: --max-consumers must be at least 1")
	case c.ConsumerIdleExpiry < 0:
		return errors.New("feed: --consumer-idle-expiry must not be negative")
	case c.MaxConsumerNameBytes < 1:
		return errors.New("feed: --max-consumer-name-bytes must be at least 1")
	case c.MetricsMaxTables < 0 || c.MetricsMaxConsumers < 0:
		return errors.New("feed: --metrics-max-tables and --metrics-max-consumers must not be negative")
	case c.MaxTombstones < 0:
		return errors.New("feed: --feed-max-tombstones must not be negative")
	case c.MaxNameBytes < 1 || c.MaxNameBytes > MaxNameBytesCeiling:
		return fmt.Errorf("feed: --max-name-bytes must be within 1..%d", MaxNameBytesCeiling)
	case c.ConsumerFlushInterval <= 0:
		return errors.New("feed: --feed-consumer-flush-interval must be positive")
	case c.DefaultRetention < 0 || c.DefaultRetention > 0 && c.DefaultRetention < MinRetention:
		return fmt.Errorf("feed: --default-retention must be 0 (forever) or at least %s", MinRetention)
	case c.SweepInterval <= 0:
		return errors.New("feed: --retention-sweep-interval must be positive")
	case c.SweepBatchFragments < 1:
		return errors.New("feed: --retention-batch-size must be at least 1")
	case c.FeedHistory < 0:
		return errors.New("feed: --feed-history must not be negative")
	case c.ConsumerHoldMaxAge <= 0:
		return errors.New("feed: --consumer-hold-max-age must be positive")
	}
	return nil
}

func (c *Config) syncOnCreate(table string) bool {
	for _, g := range c.SyncTables {
		if ok, _ := path.Match(g, table); ok {
			return true
		}
	}
	return false
}

// checkLimits refuses a configuration the store cannot hold: names longer
// than its keys take, group commits whose block (the bound plus the
// fragment that crosses it) could outgrow the store's.
func (c *Config) checkLimits(l store.Limits) error {
	switch {
	case c.MaxNameBytes > l.MaxNameBytes:
		return fmt.Errorf("feed: --max-name-bytes=%d exceeds the %d bytes the store's keys hold", c.MaxNameBytes, l.MaxNameBytes)
	case c.MaxGroupBytes > l.MaxBlockBytes-l.MaxFragmentBytes:
		return fmt.Errorf("feed: --feed-max-group-bytes=%d could make a block outgrow the store's %d bytes: at most %d",
			c.MaxGroupBytes, l.MaxBlockBytes, l.MaxBlockBytes-l.MaxFragmentBytes)
	}
	return nil
}
