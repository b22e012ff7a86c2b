package feed

import (
	"sort"
	"unicode/utf8"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
)

// Rejection reasons of ingestd_feed_rejected_points_total (a closed set).
const (
	reasonFieldType   = "field_type_conflict"
	reasonTagField    = "tag_field_conflict"
	reasonColumnLimit = "column_limit"
	reasonSeriesLimit = "series_limit"
	reasonInvalidName = "invalid_name"
	// reasonBeyondRetention: older than the table's retention.
	reasonBeyondRetention = "beyond_retention"
	// reasonTimeRange: a time outside MinTime..MaxTime (CheckTime).
	reasonTimeRange = "timestamp_range"
	// reasonInvalidValue: a tag or field value CheckTagValue or
	// CheckFieldValue refuses.
	reasonInvalidValue = "invalid_value"
	// reasonUnresolved: with a shared store, a column or series the
	// resolver had not numbered when the point was applied (never
	// expected: needs resolves them first).
	reasonUnresolved = "unresolved"
)

type metrics struct {
	commitSeconds prometheus.Histogram
	groupPoints   prometheus.Histogram
	committed     prometheus.Counter
	rejected      *prometheus.CounterVec
	queueDepth    prometheus.GaugeFunc
	drains        *prometheus.CounterVec
	// waitRefused counts long-polls answered at once past
	// --max-waiting-drains.
	waitRefused prometheus.Counter
	// filterRefusals counts drain filters refused, by reason (the
	// refused* constants of filter.go).
	filterRefusals *prometheus.CounterVec
	// tombstonesPruned counts tombstones folded into the floor.
	tombstonesPruned prometheus.Counter
	// groupSplits counts group commits cut at Config.MaxGroupBytes.
	groupSplits prometheus.Counter
	// sweepSeconds times sweep batches (the rows removed and the oldest
	// kept, per table, are reported by tableCollector).
	sweepSeconds prometheus.Histogram
	// horizonRaises counts raises of a history horizon by cause.
	horizonRaises *prometheus.CounterVec
	// consumerRefusals counts refused consumer drains and deletions by
	// reason (consumerRefusals); consumersExpired the consumers removed
	// by --consumer-idle-expiry.
	consumerRefusals *prometheus.CounterVec
	consumersExpired prometheus.Counter
	// resolveSeconds times the resolutions of parked writes;
	// resolveFailures counts those that failed (resolve.go).
	resolveSeconds  prometheus.Histogram
	resolveFailures prometheus.Counter
}

func newMetrics(reg prometheus.Registerer, s *Sequencer) *metrics {
	f := promauto.With(reg)
	m := &metrics{
		// Commits take from ~100 µs (no fsync) to seconds on a stalled disk.
		commitSeconds: f.NewHistogram(prometheus.HistogramOpts{
			Name: "ingestd_feed_commit_duration_seconds", Help: "Duration of one group commit: the store's write, from the call until it is durable (badger: the write and its fsync; jetstream: the publishes, the stream quorums' acknowledgements and the row cache's apply).",
			Buckets: prometheus.ExponentialBuckets(0.0001, 2, 16),
		}),
		// Groups hold from one line to MaxGroupPoints (100k by default).
		groupPoints: f.NewHistogram(prometheus.HistogramOpts{
			Name: "ingestd_feed_commit_batch_points", Help: "Batch size of each group commit, in points.",
			Buckets: prometheus.ExponentialBuckets(1, 4, 10),
		}),
		committed: f.NewCounter(prometheus.CounterOpts{
			Name: "ingestd_feed_committed_points_total", Help: "Points durably committed.",
		}),
		rejected: f.NewCounterVec(prometheus.CounterOpts{
			Name: "ingestd_feed_rejected_points_total", Help: "Points the sequencer rejected, by reason.",
		}, []string{"reason"}),
		drains: f.NewCounterVec(prometheus.CounterOpts{
			Name: "ingestd_feed_drains_total", Help: "Drain requests by outcome.",
		}, []string{"outcome"}),
		waitRefused: f.NewCounter(prometheus.CounterOpts{
			Name: "ingestd_feed_drain_waits_refused_total", Help: "Long-poll drains (wait > 0) answered at once, without waiting, because --max-waiting-drains were waiting.",
		}),
		filterRefusals: f.NewCounterVec(prometheus.CounterOpts{
			Name: "ingestd_feed_drain_filter_refusals_total", Help: "Drain filters refused (400), by reason: over a budget (filters, values, value_bytes) or invalid (unknown_tag, unknown_field, time_range).",
		}, []string{"reason"}),
		groupSplits: f.NewCounter(prometheus.CounterOpts{
			Name: "ingestd_feed_group_splits_total", Help: "Group commits cut at --feed-max-group-bytes (the rest follows in another commit).",
		}),
		tombstonesPruned: f.NewCounter(prometheus.CounterOpts{
			Name: "ingestd_feed_tombstones_pruned_total", Help: "Dropped tables' tombstones folded into the floor past --feed-max-tombstones.",
		}),
		// A batch takes from ~100 µs (nothing aged) to seconds (large blocks rewritten).
		sweepSeconds: f.NewHistogram(prometheus.HistogramOpts{
			Name: "ingestd_retention_sweep_duration_seconds", Help: "Duration of one retention sweep batch (the time it holds the sequencer).",
			Buckets: prometheus.ExponentialBuckets(0.0001, 4, 10),
		}),
		horizonRaises: f.NewCounterVec(prometheus.CounterOpts{
			Name: "ingestd_feed_horizon_raises_total", Help: "Raises of a table's history horizon, by cause (retention: aged rows removed; history: --feed-history or --feed-history-fragments).",
		}, []string{"cause"}),
	}
	m.consumerRefusals = f.NewCounterVec(prometheus.CounterOpts{
		Name: "ingestd_feed_consumer_refusals_total",
		Help: "Named-consumer drains and deletions refused, by reason: table_budget (--max-consumers-per-table), token_budget (--max-consumers-per-token), total_budget (--max-consumers), name_bytes (--max-consumer-name-bytes), not_owner (the consumer belongs to another token).",
	}, []string{"reason"})
	for _, r := range consumerRefusals {
		m.consumerRefusals.WithLabelValues(r)
	}
	m.consumersExpired = f.NewCounter(prometheus.CounterOpts{
		Name: "ingestd_feed_consumers_expired_total", Help: "Named consumers removed after --consumer-idle-expiry without a drain.",
	})
	f.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "ingestd_feed_consumers", Help: "Named consumers of every live table (at most --max-consumers).",
	}, func() float64 { return float64(s.counts.count()) })
	for _, c := range []string{causeRetention, causeHistory} {
		m.horizonRaises.WithLabelValues(c)
	}
	m.queueDepth = f.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "ingestd_feed_queue_depth", Help: "Batches waiting for the sequencer.",
	}, func() float64 { return float64(len(s.queue)) })
	f.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "ingestd_feed_tombstones", Help: "Dropped tables remembered by name (at most --feed-max-tombstones).",
	}, func() float64 {
		s.mu.RLock()
		defer s.mu.RUnlock()
		return float64(len(s.tombstones))
	})
	f.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "ingestd_feed_waiting_drains", Help: "Long-poll drains waiting for a fragment (at most --max-waiting-drains).",
	}, func() float64 { return float64(s.waiting.Load()) })
	f.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "ingestd_feed_series_bytes", Help: "Bytes the series dictionaries of every live table hold in memory (each series' tag set and about 100 bytes of overhead; at most --feed-max-series-bytes, past which a line bringing a new series is rejected as series_limit).",
	}, func() float64 { return float64(s.seriesBytes.Load()) })
	f.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "ingestd_feed_schema_bytes", Help: "Bytes the schemas of every live table hold in memory (each column's name and about 128 bytes of overhead; at most --feed-max-schema-bytes, past which a line or table definition adding a column is rejected as column_limit).",
	}, func() float64 { return float64(s.schemaBytes.Load()) })
	f.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "ingestd_feed_queue_capacity", Help: "Batches the sequencer queue holds (--feed-queue-length).",
	}, func() float64 { return float64(cap(s.queue)) })
	// A resolution takes one round trip per new table, column set and
	// series: ~1 ms to the store's timeout.
	m.resolveSeconds = f.NewHistogram(prometheus.HistogramOpts{
		Name: "ingestd_feed_resolve_duration_seconds", Help: "Duration of resolving one parked write's new tables, columns and series with a shared store (--store=jetstream).",
		Buckets: prometheus.ExponentialBuckets(0.0005, 4, 10),
	})
	m.resolveFailures = f.NewCounter(prometheus.CounterOpts{
		Name: "ingestd_feed_resolve_failures_total", Help: "Parked writes failed (503) because the shared store did not resolve their new tables, columns or series.",
	})
	f.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "ingestd_feed_resolving_writes", Help: "Operations parked off the sequencer on a shared store: writes while it creates their tables, adds their columns and numbers their series, a table change while it stores it, and the operations waiting behind that change.",
	}, func() float64 { return float64(s.res.parked.Load()) })
	for _, r := range []string{reasonFieldType, reasonTagField, reasonColumnLimit, reasonSeriesLimit, reasonInvalidName, reasonBeyondRetention, reasonTimeRange, reasonInvalidValue, reasonUnresolved} {
		m.rejected.WithLabelValues(r)
	}
	if reg != nil {
		reg.MustRegister(tableCollector{s.registry})
	}
	return m
}

var (
	tableSeqDesc      = prometheus.NewDesc("ingestd_feed_table_seq", "Highest x_seq handed out, per sync table (the --metrics-max-tables with the highest).", []string{"table"}, nil)
	tableWMDesc       = prometheus.NewDesc("ingestd_feed_table_watermark", "Highest x_seq a drain may return, per sync table (the --metrics-max-tables with the highest seq).", []string{"table"}, nil)
	tableEpochDesc    = prometheus.NewDesc("ingestd_feed_table_epoch", "Current epoch, per sync table (the --metrics-max-tables with the highest seq).", []string{"table"}, nil)
	tableInFlightDesc = prometheus.NewDesc("ingestd_feed_table_in_flight",
		"seq - watermark, per sync table (the --metrics-max-tables with the highest seq); table=\"\" sums the others.", []string{"table"}, nil)
	tableHorizonDesc = prometheus.NewDesc("ingestd_feed_table_horizon", "Lowest x_seq still drainable (history horizon), per sync table (the --metrics-max-tables with the highest seq).", []string{"table"}, nil)
	unlabelledDesc   = prometheus.NewDesc("ingestd_feed_metrics_unlabelled",
		"Sync tables (kind=\"table\"), tables with retention figures (kind=\"retention\") and named consumers (kind=\"consumer\") past --metrics-max-tables and --metrics-max-consumers, summed in the table=\"\" series.", []string{"kind"}, nil)
	removedRowsDesc = prometheus.NewDesc("ingestd_retention_removed_rows_total",
		"Fragments (stored rows) removed by retention since the process started, per table (the --metrics-max-tables with the most); table=\"\" sums the others.", []string{"table"}, nil)
	oldestRetainedDesc = prometheus.NewDesc("ingestd_retention_oldest_retained_time_seconds",
		"Time (Unix seconds) of the oldest row a table with a retention still holds, as of its last complete sweep (the --metrics-max-tables with the most rows removed); table=\"\" is the oldest of the others.", []string{"table"}, nil)
	holdingDesc = prometheus.NewDesc("ingestd_feed_consumer_holds_history",
		"1 while a named consumer holds its table's history horizon (--consumer-holds-history, seen within --consumer-hold-max-age, current epoch), else 0 (the --metrics-max-consumers laggiest).", []string{"table", "consumer"}, nil)
	lagFragmentsDesc = prometheus.NewDesc("ingestd_feed_consumer_lag_fragments",
		"Fragments a named consumer has not applied: watermark - position (the whole watermark when its epoch is stale); the --metrics-max-consumers laggiest, table=\"\",consumer=\"\" sums the others.", []string{"table", "consumer"}, nil)
	lagSecondsDesc = prometheus.NewDesc("ingestd_feed_consumer_lag_seconds",
		"How long ago the server committed the oldest fragment a named consumer has not applied; 0 when caught up (the --metrics-max-consumers laggiest).", []string{"table", "consumer"}, nil)
	consumerPositionDesc = prometheus.NewDesc("ingestd_feed_consumer_position", "A named consumer's acknowledged position (x_seq) (the --metrics-max-consumers laggiest).", []string{"table", "consumer"}, nil)
)

// tableCollector reports per sync table state, bounded: the
// Config.MetricsMaxTables tables with the highest seq and the
// Config.MetricsMaxConsumers laggiest named consumers get labelled
// series, the others are summed in one series labelled "" (no table can
// be named so), so a scrape stays bounded whatever the number and length
// of the names clients create. A label value must be valid UTF-8 or the
// whole scrape fails: CheckName guarantees it for every name created
// since, and a table or consumer an older version stored under an
// invalid name is left out rather than break /metrics.
type tableCollector struct{ s *registry }

func (c tableCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- tableSeqDesc
	ch <- tableWMDesc
	ch <- tableEpochDesc
	ch <- tableInFlightDesc
	ch <- lagFragmentsDesc
	ch <- lagSecondsDesc
	ch <- consumerPositionDesc
	ch <- tableHorizonDesc
	ch <- holdingDesc
	ch <- unlabelledDesc
	ch <- removedRowsDesc
	ch <- oldestRetainedDesc
}

func (c tableCollector) Collect(ch chan<- prometheus.Metric) {
	type row struct {
		name string
		st   SyncStatus
	}
	var rows []row
	var ret []retentionRow
	for _, t := range c.s.liveTables() {
		if !validLabel(t.name) {
			continue
		}
		p := t.snapshot()
		if p.sync {
			rows = append(rows, row{t.name, p.statusLocked()})
		}
		if p.removed > 0 || p.hasOldest {
			ret = append(ret, retentionRow{t.name, p.removed, p.oldest, p.hasOldest})
		}
	}
	sort.Slice(rows, func(i, j int) bool {
		if rows[i].st.Seq != rows[j].st.Seq {
			return rows[i].st.Seq > rows[j].st.Seq
		}
		return rows[i].name < rows[j].name
	})
	n := min(len(rows), c.s.cfg.MetricsMaxTables)
	for _, r := range rows[:n] {
		st := r.st
		ch <- prometheus.MustNewConstMetric(tableSeqDesc, prometheus.GaugeValue, float64(st.Seq), r.name)
		ch <- prometheus.MustNewConstMetric(tableWMDesc, prometheus.GaugeValue, float64(st.Watermark), r.name)
		ch <- prometheus.MustNewConstMetric(tableEpochDesc, prometheus.GaugeValue, float64(st.Epoch), r.name)
		ch <- prometheus.MustNewConstMetric(tableInFlightDesc, prometheus.GaugeValue, float64(st.Seq-st.Watermark), r.name)
		ch <- prometheus.MustNewConstMetric(tableHorizonDesc, prometheus.GaugeValue, float64(st.Horizon), r.name)
	}
	inFlight := uint64(0)
	for _, r := range rows[n:] {
		inFlight += r.st.Seq - r.st.Watermark
	}
	if len(rows) > n {
		ch <- prometheus.MustNewConstMetric(tableInFlightDesc, prometheus.GaugeValue, float64(inFlight), "")
	}
	ch <- prometheus.MustNewConstMetric(unlabelledDesc, prometheus.GaugeValue, float64(len(rows)-n), "table")
	c.collectRetention(ch, ret)
	c.collectLag(ch)
}

// retentionRow is what retention did to one table.
type retentionRow struct {
	name      string
	removed   uint64
	oldest    int64
	hasOldest bool
}

// collectRetention reports the retention figures of the
// Config.MetricsMaxTables tables with the most rows removed; the others'
// removed rows are summed and their oldest kept row is the oldest of
// them, labelled "".
func (c tableCollector) collectRetention(ch chan<- prometheus.Metric, rows []retentionRow) {
	sort.Slice(rows, func(i, j int) bool {
		if rows[i].removed != rows[j].removed {
			return rows[i].removed > rows[j].removed
		}
		return rows[i].name < rows[j].name
	})
	n := min(len(rows), c.s.cfg.MetricsMaxTables)
	for _, r := range rows[:n] {
		ch <- prometheus.MustNewConstMetric(removedRowsDesc, prometheus.CounterValue, float64(r.removed), r.name)
		if r.hasOldest {
			ch <- prometheus.MustNewConstMetric(oldestRetainedDesc, prometheus.GaugeValue, float64(r.oldest)/1e9, r.name)
		}
	}
	var other retentionRow
	for _, r := range rows[n:] {
		other.removed += r.removed
		if r.hasOldest && (!other.hasOldest || r.oldest < other.oldest) {
			other.oldest, other.hasOldest = r.oldest, true
		}
	}
	if len(rows) > n {
		ch <- prometheus.MustNewConstMetric(removedRowsDesc, prometheus.CounterValue, float64(other.removed), "")
		if other.hasOldest {
			ch <- prometheus.MustNewConstMetric(oldestRetainedDesc, prometheus.GaugeValue, float64(other.oldest)/1e9, "")
		}
	}
	ch <- prometheus.MustNewConstMetric(unlabelledDesc, prometheus.GaugeValue, float64(len(rows)-n), "retention")
}

// collectLag reports the laggiest named consumers of the sync tables, each
// lag from one snapshot of its table, so it is never negative, also while
// the consumer is offline; the others are summed.
func (c tableCollector) collectLag(ch chan<- prometheus.Metric) {
	top, others, othersFrags := c.s.laggiest(c.s.cfg.MetricsMaxConsumers, func(name string, p *published) bool {
		return p.sync && validLabel(name)
	})
	for _, l := range top {
		if !utf8.ValidString(l.Name) {
			others++
			othersFrags += l.Fragments
			continue
		}
		ch <- prometheus.MustNewConstMetric(lagFragmentsDesc, prometheus.GaugeValue, float64(l.Fragments), l.Table, l.Name)
		ch <- prometheus.MustNewConstMetric(lagSecondsDesc, prometheus.GaugeValue, l.Seconds, l.Table, l.Name)
		ch <- prometheus.MustNewConstMetric(consumerPositionDesc, prometheus.GaugeValue, float64(l.Position), l.Table, l.Name)
		holding := 0.0
		if l.HoldsHistory {
			holding = 1
		}
		ch <- prometheus.MustNewConstMetric(holdingDesc, prometheus.GaugeValue, holding, l.Table, l.Name)
	}
	if others > 0 {
		ch <- prometheus.MustNewConstMetric(lagFragmentsDesc, prometheus.GaugeValue, float64(othersFrags), "", "")
	}
	ch <- prometheus.MustNewConstMetric(unlabelledDesc, prometheus.GaugeValue, float64(others), "consumer")
}

// validLabel reports whether name can be a label value (valid UTF-8, or
// the whole scrape fails).
func validLabel(name string) bool { return utf8.ValidString(name) }
