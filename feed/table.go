package feed

import (
	"iter"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ingestd/ingestd/store"
)

// table is one live table.
type table struct {
	name string

	// Owned by the sequencer goroutine; no lock.
	meta      store.TableMeta
	colByName map[string]uint32 // column name -> position in meta.Columns
	// shapeKeys are the field keys of the last point applied, in its
	// order, and shapeCols their positions in meta.Columns: a point whose
	// keys are the same (a writer sends a table's fields in one order)
	// finds their columns without a colByName look-up. Positions never
	// change and columns are never removed (TRUNCATE and DROP replace the
	// table), so an entry stays right as long as the table.
	shapeKeys []string
	shapeCols []uint32
	series    map[string]uint64 // canonical tag set -> series id
	seq       uint64            // highest x_seq stamped (published as pub.seq)
	group     *groupTable       // this table's part of the group being built
	// lastFrags is the fragment count of the table's last group, the
	// capacity the next one starts with (at most --feed-max-group-points).
	lastFrags int
	// version is the store.Followed.Version of the metadata last taken
	// from another process's change (store.Shared only).
	version uint64
	// metaBytes bounds the stored size of the schema
	// (store.ColumnBytes of every column), checked against
	// store.Limits.MaxMetaBytes before a column is added.
	metaBytes int
	// seriesBytes is what the series dictionary holds (seriesCost of
	// each series), counted in the registry's seriesBytes while the table
	// is registered (the table of its name).
	seriesBytes int64
	// schemaBytes is what the schema holds (columnCost of each column),
	// counted in the registry's schemaBytes while the table is
	// registered.
	schemaBytes int64
	registered  bool
	// metaPending and announce are what the resolver added to the table
	// (store.Shared only: resolve.go) that its next block carries: its
	// metadata (the columns, a table created) and the new series.
	metaPending bool
	announce    []store.Series

	mu  sync.Mutex // guards pub
	pub published

	// consumers is shared with the table that replaces this one on
	// TRUNCATE: named consumers outlive it.
	consumers *consumerSet
	// dropping is set once a DROP of a shared store stored the table's
	// tombstone, before the sequencer takes the table away: consumer
	// flushes leave it out (changes.go).
	dropping atomic.Bool
}

// published is the state readers see. The slices are append-only
// snapshots: the sequencer only appends past the length a reader holds.
type published struct {
	sync      bool
	epoch     uint64
	seq       uint64
	watermark uint64
	tid       uint64
	horizon   uint64 // lowest x_seq still drainable (docs/contract.md#horizon)
	retention *int64 // the table's own retention in ns (nil: the default)
	points    uint64 // points committed since the process started
	// removed counts the fragments retention removed since the process
	// started (kept across TRUNCATE); oldest is the time (Unix
	// nanoseconds) of the oldest row retention keeps, as of the last
	// complete sweep, when hasOldest.
	removed   uint64
	oldest    int64
	hasOldest bool
	cols      []store.Column  // schema, "time" excluded
	tags      [][]store.Field // tag set by series id (index 0 unused)

	// since holds, per column of cols, the x_seq it was added at (at
	// least as long as cols: store.TableMeta.ColumnsSince).
	since []uint64

	// changed is closed (and replaced) when the watermark, sync or epoch
	// changes, or the table is truncated or dropped: long-polls wait on it.
	changed chan struct{}
}

// notifyLocked wakes long-polls waiting on the table. t.mu must be held.
func (t *table) notifyLocked() {
	close(t.pub.changed)
	t.pub.changed = make(chan struct{})
}

func (t *table) notify() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.notifyLocked()
}

func (t *table) status() SyncStatus {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.pub.statusLocked()
}

// snapshot returns a copy of the published state.
func (t *table) snapshot() published {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.pub
}

// statusLocked returns the sync status. t.mu must be held.
func (p *published) statusLocked() SyncStatus {
	return SyncStatus{Enabled: p.sync, Epoch: p.epoch, Seq: p.seq, Watermark: p.watermark, Horizon: p.horizon}
}

// setSync makes sync and epoch the table's and publishes them (a drain
// of another epoch is refused from then on). Sequencer goroutine only.
func (t *table) setSync(sync bool, epoch uint64) {
	t.meta.Sync, t.meta.Epoch = sync, epoch
	t.mu.Lock()
	t.pub.sync, t.pub.epoch = sync, epoch
	t.notifyLocked()
	t.mu.Unlock()
}

// setRetention sets the table's own retention. Sequencer goroutine only.
func (t *table) setRetention(d time.Duration) {
	ns := int64(d)
	t.meta.Retention = &ns
	t.mu.Lock()
	t.pub.retention = &ns
	t.mu.Unlock()
}

// info returns the table's description; def is the default retention.
func (p *published) info(name string, def time.Duration) TableInfo {
	cols := make([]Column, 0, len(p.cols)+1)
	cols = append(cols, Column{Name: "time", Kind: KindTime})
	for _, c := range schemaOrder(p.cols) {
		cols = append(cols, Column(c))
	}
	info := TableInfo{Name: name, Sync: p.statusLocked(), Columns: cols, Retention: def, Points: p.points}
	if p.retention != nil {
		info.Retention, info.OwnRetention = time.Duration(*p.retention), true
	}
	return info
}

// schemaOrder yields the positions and columns of a schema in listing order
// (docs/contract.md#columns): every tag, then every field, each in order of first appearance.
// Positions in cols never change (stored fragments refer to them); only the
// listing puts the tags first.
func schemaOrder(cols []store.Column) iter.Seq2[int, store.Column] {
	return func(yield func(int, store.Column) bool) {
		for _, tags := range []bool{true, false} {
			for i, c := range cols {
				if (c.Kind == KindTag) == tags && !yield(i, c) {
					return
				}
			}
		}
	}
}

// seriesCost is what a series of canonical key keyBytes long and tags
// holds in a table's dictionary (the key, the tag values and the
// overhead of the map entry, the published tag slice and its fields),
// counted against Config.MaxSeriesBytes.
func seriesCost(keyBytes int, tags []store.Field) int64 {
	n := int64(keyBytes) + seriesOverhead
	for _, tag := range tags {
		n += int64(len(tag.Value.Str)) + fieldOverhead
	}
	return n
}

// pointSeriesCost is seriesCost of p's series.
func pointSeriesCost(p *Point) int64 {
	n := int64(len(p.Series)) + seriesOverhead
	for _, tag := range p.Tags {
		n += int64(len(tag.Value)) + fieldOverhead
	}
	return n
}

// seriesOverhead and fieldOverhead are a series' and a tag's bytes
// besides their strings (map entry, slice and string headers, a
// store.Field).
const (
	seriesOverhead = 64
	fieldOverhead  = 48
)

// columnOverhead is what a column costs in memory besides its name: its
// store.Column and x_seq in the schema, its entry in the name index, and
// the published copies' share.
const columnOverhead = 128

// columnCost is what a column named name holds in memory, counted
// against Config.MaxSchemaBytes.
func columnCost(name string) int64 { return int64(len(name)) + columnOverhead }

// newTable builds a table from its metadata and series dictionary.
func newTable(meta store.TableMeta, series []store.Series) *table {
	t := &table{
		name:      meta.Name,
		meta:      meta,
		colByName: make(map[string]uint32, len(meta.Columns)),
		series:    make(map[string]uint64, len(series)),
		seq:       meta.Seq,
		consumers: newConsumerSet(),
	}
	for i, c := range meta.Columns {
		t.colByName[c.Name] = uint32(i)
		t.metaBytes += store.ColumnBytes(c.Name)
		t.schemaBytes += columnCost(c.Name)
	}
	for len(t.meta.ColumnsSince) < len(t.meta.Columns) {
		t.meta.ColumnsSince = append(t.meta.ColumnsSince, 0) // kept before since was
	}
	tags := make([][]store.Field, 1, len(series)+1)
	var key []byte
	for _, s := range series {
		for uint64(len(tags)) <= s.ID {
			tags = append(tags, nil)
		}
		tags[s.ID] = s.Tags
		key = appendSeriesKey(key[:0], meta.Columns, s.Tags)
		t.series[string(key)] = s.ID
		t.seriesBytes += seriesCost(len(key), s.Tags)
	}
	t.pub = published{
		sync: meta.Sync, epoch: meta.Epoch, seq: t.seq, watermark: t.seq, tid: meta.ID, horizon: 1, retention: meta.Retention,
		cols: t.meta.Columns, since: t.meta.ColumnsSince, tags: tags, changed: make(chan struct{}),
	}
	return t
}

// colSince returns the x_seq column i of the schema was added at.
func (p *published) colSince(i int) uint64 {
	if i < len(p.since) {
		return p.since[i]
	}
	return 0
}

// addColumn appends c to t's schema (columnsAdded publishes it).
// Sequencer goroutine only.
func (t *table) addColumn(c store.Column) {
	t.colByName[c.Name] = uint32(len(t.meta.Columns))
	t.meta.Columns = append(t.meta.Columns, c)
	t.metaBytes += store.ColumnBytes(c.Name)
	t.schemaBytes += columnCost(c.Name)
}

// columnsAdded records that the columns of t's schema past those with a
// since were added now, at t's highest x_seq stamped, and publishes the
// schema. Sequencer goroutine only; t.mu must not be held.
func (t *table) columnsAdded() {
	for len(t.meta.ColumnsSince) < len(t.meta.Columns) {
		t.meta.ColumnsSince = append(t.meta.ColumnsSince, t.seq)
	}
	t.mu.Lock()
	t.pub.cols, t.pub.since = t.meta.Columns, t.meta.ColumnsSince
	t.mu.Unlock()
}

// appendSeriesKey renders a tag set as the canonical Point.Series string:
// tags sorted by key (the stored order), escaped as ILP escapes tag keys and
// values.
func appendSeriesKey(dst []byte, cols []store.Column, tags []store.Field) []byte {
	for i, t := range tags {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = AppendEscapedTag(dst, cols[t.Col].Name)
		dst = append(dst, '=')
		dst = AppendEscapedTag(dst, t.Value.Str)
	}
	return dst
}

// AppendSeries appends the canonical Point.Series of tags, which must be
// sorted by key: "k=v,k2=v2", each key and value escaped with
// AppendEscapedTag.
func AppendSeries(dst []byte, tags []Tag) []byte {
	for i, t := range tags {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = AppendEscapedTag(append(AppendEscapedTag(dst, t.Key), '='), t.Value)
	}
	return dst
}

// AppendEscapedTag appends s escaped as an ILP tag key or value (commas,
// equals signs and spaces get a backslash) and returns the extended buffer.
// Point.Series uses this rendering. A backslash that precedes one of those
// bytes, another backslash or the end of s is doubled too, so that the
// rendering of a tag set is injective: two tag sets never share a series
// key (without it, key `a=\` value `v` and key `a\` value `=v` were both
// `a\=\=v`). Read from the left, a backslash followed by a comma, an
// equals sign, a space or a backslash stands for that byte, any other
// backslash for itself, and an unescaped comma or equals sign ends the
// key or value. A backslash elsewhere is kept as it is, as ILP writes it
// (C:\Windows).
func AppendEscapedTag(dst []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		switch c := s[i]; c {
		case ',', '=', ' ':
			dst = append(dst, '\\', c)
		case '\\':
			if i+1 == len(s) || tagEscaped[s[i+1]] {
				dst = append(dst, '\\')
			}
			dst = append(dst, c)
		default:
			dst = append(dst, c)
		}
	}
	return dst
}

// tagEscaped holds the bytes a backslash escapes in a series key.
var tagEscaped = [256]bool{',': true, '=': true, ' ': true, '\\': true}
