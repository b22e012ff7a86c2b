package rowengine

import (
	"bytes"
	"encoding/binary"
	"errors"
	"math"
	"sort"
	"sync/atomic"

	"github.com/dgraph-io/badger/v4"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/ingestd/ingestd/store"
)

// lookupStats counts the reads Commit makes to place late points (see
// doc.go, "Late points"): point-index gets, reverse seeks among series runs
// and among point-index entries, and the iterators opened for them.
type lookupStats struct {
	pointGets      atomic.Uint64
	runSeeks       atomic.Uint64
	maxSeeks       atomic.Uint64
	gapSeeks       atomic.Uint64
	iterators      atomic.Uint64
	fragmentBlocks atomic.Uint64 // blocks read for a point's first fragment
	// Reads of drains and row copies (ReadSeq, ReadRows): the blocks they
	// decode and the point-index entries they read (overwritten points
	// whose entry this process does not keep in memory).
	readBlocks  atomic.Uint64
	readEntries atomic.Uint64
}

// lookupCounts is a snapshot of lookupStats.
type lookupCounts struct {
	pointGets, runSeeks, maxSeeks, gapSeeks, iterators, fragmentBlocks uint64
	readBlocks, readEntries                                            uint64
}

func (s *lookupStats) load() lookupCounts {
	return lookupCounts{s.pointGets.Load(), s.runSeeks.Load(), s.maxSeeks.Load(), s.gapSeeks.Load(), s.iterators.Load(),
		s.fragmentBlocks.Load(), s.readBlocks.Load(), s.readEntries.Load()}
}

// ReadCounts returns how many blocks and point-index entries the reads of
// drains and row copies (ReadSeq, ReadRows) have read since Open; the
// same figures as ingestd_store_feed_reads_total. Safe for concurrent use.
func (db *Engine) ReadCounts() (blocks, entries uint64) {
	return db.stats.readBlocks.Load(), db.stats.readEntries.Load()
}

// lookup places the late points of one commit. It reads a read-only view
// of what earlier commits stored, never the commit's own write
// transaction: a badger iterator over a write transaction sorts all its
// pending writes when created, so a per-point iterator there made a late
// point cost O(size of the commit). What the commit itself writes is
// known to the committer in memory (its runs and pending point entries),
// so the view lacks nothing a lookup needs: one commit holds at most one
// block per table.
//
// The view and its iterators (over series runs, reverse and forward, and
// over point entries, reverse) are opened on first use and reused, with fresh seeks, for every
// lookup of the commit; the last stored run read for each series is kept
// decoded, so the late points of a resent or backfilled batch, which fall
// in the same few runs, mostly cost one binary search.
type lookup struct {
	db    *Engine
	view  *badger.Txn
	runIt *badger.Iterator // reverse over ksRun
	fwdIt *badger.Iterator // forward over ksRun
	ptIt  *badger.Iterator // reverse over ksPoint
	// gen is Engine.flushGen when the view began.
	gen   uint64
	key   []byte
	runs  map[uint64]storedRun // by series id, for the current table
	tid   uint64
	heads heads       // the current table's heads: runs not stored as keys yet
	st    *tableState // the current table's state: its series' stored bounds
	fetch fetcher     // the fragments whose fields a point's union starts from
}

// storedRun is a stored series run, decoded: the fragments it names in
// strictly ascending time.
type storedRun []runEntry

type runEntry struct {
	ts int64
	r  ref
}

func (r storedRun) covers(ts int64) bool {
	return len(r) > 0 && r[0].ts <= ts && ts <= r[len(r)-1].ts
}

func (r storedRun) find(ts int64) (ref, bool) {
	i := sort.Search(len(r), func(i int) bool { return r[i].ts >= ts })
	if i < len(r) && r[i].ts == ts {
		return r[i].r, true
	}
	return ref{}, false
}

func (l *lookup) open() {
	gen := l.db.flushGen.Load()
	if l.view != nil {
		if gen == l.gen {
			return
		}
		// A head flush committed run keys since the view began: keys
		// newer than a view are invisible to it but not free, as its
		// iterators step over every one of them between a seek's target
		// and the nearest key it sees. A flush of a head of reordered
		// writes stores a run key per few points; a commit of late
		// points seeking among them through an older view spent a
		// minute. The heads answer for the sealed runs either way, so
		// the fresh view sees nothing the look-ups do not already know.
		l.closeView()
	}
	l.gen = gen
	l.view = l.db.bdb.NewTransaction(false)
	l.runIt = l.view.NewIterator(badger.IteratorOptions{Prefix: []byte{ksRun}, Reverse: true})
	l.fwdIt = l.view.NewIterator(badger.IteratorOptions{Prefix: []byte{ksRun}})
	l.ptIt = l.view.NewIterator(badger.IteratorOptions{Prefix: []byte{ksPoint}, Reverse: true})
	l.db.stats.iterators.Add(3)
}

// close releases the view and the decoded runs; the lookup may be
// opened again.
func (l *lookup) close() {
	l.closeView()
	l.runs = nil
}

// closeView releases the view, its iterators and the fetcher's blocks;
// the decoded runs stay (stored runs do not change while a commit runs).
func (l *lookup) closeView() {
	if l.view == nil {
		return
	}
	l.runIt.Close()
	l.fwdIt.Close()
	l.ptIt.Close()
	l.fetch.close()
	l.view.Discard()
	l.view, l.runIt, l.fwdIt, l.ptIt = nil, nil, nil, nil
}

// table starts the lookups of table instance tid, whose state is st (the
// decoded runs of the previous table are dropped).
func (l *lookup) table(tid uint64, st *tableState) {
	l.heads, l.st = heads{&st.head, st.sealed}, st
	if l.tid != tid || l.runs == nil {
		l.tid, l.runs = tid, map[uint64]storedRun{}
		l.fetch.close()
	}
}

// fragment decodes the stored fragment r names into f (see fetcher.fetch):
// a point's first fragment when a commit writes the point again. The
// fragments of a resent batch lie in the few blocks the fetcher keeps.
func (l *lookup) fragment(r ref, f *store.Fragment) (bool, error) {
	l.open()
	l.fetch.reads = &l.db.stats.fragmentBlocks
	return l.fetch.fetch(l.view, l.tid, r, f)
}

// aboveStored reports whether the LSM tree holds no run key or
// point-index entry of series sid at or after ts (seriesMax), so that
// the heads alone answer a lookup there.
func (l *lookup) aboveStored(sid uint64, ts int64) bool {
	m, ok := l.st.maxTs[sid]
	return ok && ts > m.stored
}

// point returns the point-index entry at (sid, ts) as stored by earlier
// commits (a copy), nil when there is none. One get, none above the
// series' stored bound.
func (l *lookup) point(sid uint64, ts int64) ([]byte, error) {
	if l.aboveStored(sid, ts) {
		return nil, nil
	}
	l.open()
	l.db.stats.pointGets.Add(1)
	l.key = pointKey(l.key, ksPoint, l.tid, sid, ts)
	item, err := l.view.Get(l.key)
	switch {
	case errors.Is(err, badger.ErrKeyNotFound):
		return nil, nil
	case err != nil:
		return nil, err
	}
	return item.ValueCopy(nil)
}

// run finds the stored fragment of series sid at time ts in the series'
// runs: the run with the greatest first time at or below ts is the only
// one that can hold it, runs being disjoint and ascending. At most one
// reverse seek; none when the series' last decoded run covers ts.
func (l *lookup) run(sid uint64, ts int64) (ref, bool, error) {
	if r := l.runs[sid]; r.covers(ts) {
		f, ok := r.find(ts)
		return f, ok, nil
	}
	r, err := l.runBefore(sid, ts)
	if err != nil {
		return ref{}, false, err
	}
	f, ok := r.find(ts)
	return f, ok, nil
}

// runBefore returns the run of series sid with the greatest first time at
// or below ts (nil when there is none), in the head or stored, decoded
// and kept as the series' last decoded run. One reverse seek, none above
// the series' stored bound.
func (l *lookup) runBefore(sid uint64, ts int64) (storedRun, error) {
	var r storedRun
	if h, _ := l.heads.before(sid, ts); h != nil {
		r = h.ents
	}
	if l.aboveStored(sid, ts) {
		if r != nil {
			l.runs[sid] = r
		}
		return r, nil
	}
	l.open()
	l.db.stats.runSeeks.Add(1)
	prefix := tableKey(ksRun, l.tid, sid)
	l.key = pointKey(l.key, ksRun, l.tid, sid, ts)
	l.runIt.Seek(l.key)
	if l.runIt.Valid() && bytes.HasPrefix(l.runIt.Item().Key(), prefix) && (r == nil || pointKeyTime(l.runIt.Item().Key()) > r[0].ts) {
		item := l.runIt.Item()
		err := item.Value(func(v []byte) error {
			var err error
			r, err = decodeRun(v, pointKeyTime(item.Key()))
			return err
		})
		if err != nil {
			return nil, &store.CorruptionError{Key: item.KeyCopy(nil), Err: err}
		}
	}
	if r != nil {
		l.runs[sid] = r
	}
	return r, nil
}

// gap returns the open interval (lo, hi) around ts in which series sid has
// no fragment stored by earlier commits, neither in a run nor in the point
// index, or ok false when ts is not in such an interval (a stored run spans
// ts, or a point-index entry lies at or above ts below the next run). lo is
// the last time of the run before ts or of the point-index entry below hi,
// whichever is greater; hi is the first time of the next run
// (math.MaxInt64 when none). No seek when the series' last decoded run
// spans ts or ts lies above the series' stored bound (the heads answer);
// else one reverse and one forward seek among runs and one reverse seek
// among point-index entries.
func (l *lookup) gap(sid uint64, ts int64) (lo, hi int64, ok bool, err error) {
	if l.runs[sid].covers(ts) {
		return 0, 0, false, nil // the last decoded run spans ts: no seek
	}
	before, err := l.runBefore(sid, ts)
	if err != nil || (len(before) > 0 && before[len(before)-1].ts >= ts) {
		return 0, 0, false, err
	}
	lo, hi = math.MinInt64, math.MaxInt64
	if len(before) > 0 {
		lo = before[len(before)-1].ts
	}
	_, hi = l.heads.before(sid, ts)
	if l.aboveStored(sid, ts) {
		return lo, hi, true, nil
	}
	l.db.stats.gapSeeks.Add(2)
	prefix := tableKey(ksRun, l.tid, sid)
	l.key = pointKey(l.key, ksRun, l.tid, sid, ts)
	if l.fwdIt.Seek(l.key); l.fwdIt.Valid() && bytes.HasPrefix(l.fwdIt.Item().Key(), prefix) {
		hi = min(hi, pointKeyTime(l.fwdIt.Item().Key()))
	}
	l.key = pointKey(l.key, ksPoint, l.tid, sid, hi-1)
	if l.ptIt.Seek(l.key); l.ptIt.Valid() && bytes.HasPrefix(l.ptIt.Item().Key(), l.key[:17]) {
		p := pointKeyTime(l.ptIt.Item().Key())
		if p >= ts {
			return 0, 0, false, nil
		}
		lo = max(lo, p)
	}
	return lo, hi, true, nil
}

// decodeRun decodes a run value (see doc.go) whose key holds firstTs.
func decodeRun(v []byte, firstTs int64) (storedRun, error) {
	kind, base, body, dod, err := runHeader(v)
	if err != nil {
		return nil, err
	}
	return decodeRunBody(kind, base, body, firstTs, dod)
}

// decodeRunBody decodes the body of a run of kind and base
// (runBuilder.appendBodyDoD when dod, else appendBody) whose first time
// is firstTs.
func decodeRunBody(kind byte, base uint64, body []byte, firstTs int64, dod bool) (storedRun, error) {
	count, _ := binary.Uvarint(body)
	return appendRunBody(make(storedRun, 0, min(count, uint64(len(body)))), kind, base, body, firstTs, dod)
}

// appendRunBody is decodeRunBody appending the entries to dst.
func appendRunBody(dst storedRun, kind byte, base uint64, body []byte, firstTs int64, dod bool) (storedRun, error) {
	n := len(dst)
	err := runScanBody(body, firstTs, dod, func(t int64, idx uint64) bool {
		dst = append(dst, runEntry{ts: t, r: ref{idx: idx}})
		return true
	})
	for i := n; i < len(dst); i++ {
		if kind == 'L' {
			dst[i].r = ref{seq: base + dst[i].r.idx}
		} else {
			dst[i].r.block = base
		}
	}
	return dst, err
}

// maxTs returns the highest time stored for series sid by earlier commits
// (math.MinInt64 when none): the greatest of its last point-index entry
// and the last times of its last run and last head run. Two reverse
// seeks.
func (l *lookup) maxTs(sid uint64) (int64, error) {
	l.open()
	l.db.stats.maxSeeks.Add(2)
	hi := int64(math.MinInt64)
	if ts, ok := l.heads.last(sid); ok {
		hi = ts
	}
	last := pointKey(nil, ksPoint, l.tid, sid, math.MaxInt64)
	if l.ptIt.Seek(last); l.ptIt.Valid() && bytes.HasPrefix(l.ptIt.Item().Key(), last[:17]) {
		hi = max(hi, pointKeyTime(l.ptIt.Item().Key()))
	}
	last[0] = ksRun
	if l.runIt.Seek(last); l.runIt.Valid() && bytes.HasPrefix(l.runIt.Item().Key(), last[:17]) {
		item := l.runIt.Item()
		err := item.Value(func(v []byte) error {
			ts, err := runLastTs(v, pointKeyTime(item.Key()))
			hi = max(hi, ts)
			return err
		})
		if err != nil {
			return 0, &store.CorruptionError{Key: item.KeyCopy(nil), Err: err}
		}
	}
	return hi, nil
}

// statsCollector reports lookupStats.
type statsCollector struct{ db *Engine }

var (
	lookupDesc = prometheus.NewDesc("ingestd_store_index_reads_total",
		"Reads the commit path made to place late or repeated points, by kind: point (point-index get), run (reverse seek among series runs), max (reverse seek for a series' highest stored time), gap (seeks bounding the interval a series' new late points fill), iterator (iterators opened for them), fragment (blocks read for the first fragment of a point written again).",
		[]string{"kind"}, nil)
	feedReadsDesc = prometheus.NewDesc("ingestd_store_feed_reads_total",
		"Reads made by drains and row copies, by kind: block (blocks decoded), point (point-index entries of overwritten points read from the store).",
		[]string{"kind"}, nil)
)

func (c statsCollector) Describe(ch chan<- *prometheus.Desc) { ch <- lookupDesc; ch <- feedReadsDesc }

func (c statsCollector) Collect(ch chan<- prometheus.Metric) {
	s := c.db.stats.load()
	for _, k := range []struct {
		kind string
		v    uint64
	}{{"point", s.pointGets}, {"run", s.runSeeks}, {"max", s.maxSeeks}, {"gap", s.gapSeeks}, {"iterator", s.iterators}, {"fragment", s.fragmentBlocks}} {
		ch <- prometheus.MustNewConstMetric(lookupDesc, prometheus.CounterValue, float64(k.v), k.kind)
	}
	ch <- prometheus.MustNewConstMetric(feedReadsDesc, prometheus.CounterValue, float64(s.readBlocks), "block")
	ch <- prometheus.MustNewConstMetric(feedReadsDesc, prometheus.CounterValue, float64(s.readEntries), "point")
}
