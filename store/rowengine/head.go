package rowengine

import (
	"cmp"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"slices"
	"sort"
	"strings"
	"unsafe"

	"github.com/dgraph-io/badger/v4"

	"github.com/ingestd/ingestd/store"
)

// The head holds the series runs of recent commits in memory (see doc.go,
// "The head"). A commit writes its runs as one head record ('k' tid n),
// whatever the number of series it touches, and adds them to its table's
// head, where a series' in-order run joins the series' previous one when
// the two are adjacent. Once the head holds Config.HeadMaxEntries run
// entries, flushHeads writes every head run as a run key ('r') and
// deletes the records. Open rebuilds the head from the records left, so
// a crash loses nothing: the records are written with the commit's block.

// headRun is a series run held by the head, not yet stored as a run key.
type headRun struct {
	kind    byte   // 'L': entries name x_seqs; 'U': an unsynced block's fragments
	block   uint64 // 'U': the block number
	inOrder bool   // made of points above the series' stored maximum
	step    int64  // the smallest time step between two entries (0: one entry)
	ents    storedRun
}

func (r *headRun) last() int64 { return r.ents[len(r.ents)-1].ts }

// tableHead is one table instance's head. Touched by the writer only,
// but for entries, which Engine.mu guards (metrics read it).
type tableHead struct {
	series  map[uint64][]*headRun // by series id: disjoint, by ascending first time
	records [][]byte              // the head records' keys
	entries int
	bytes   int64 // of the head records applied; Engine.mu guards it too
	newDups int   // len(fresh); Engine.mu guards it too
	// over holds, by series id, the references of the fragments that
	// overwrote a point (its second and later ones), in commit order. A
	// flush stores them as overwrite runs, and the entry of each point
	// they name as tableState.dups holds it then.
	over map[uint64][]runEntry
	// fresh holds the points that became overwritten in this head: their
	// overwrite markers are not stored yet.
	fresh []pointID
}

// maxHeadRunEntries bounds a run the head grows by joining commits: a
// look-up decodes a whole stored run (a late point after a flush), so a
// longer one costs every late point more (1,024 entries doubled the
// server's CPU per line in a 1,000-series soak), and a shorter one
// costs more run keys per flush.
const maxHeadRunEntries = 128

// maxJoinSteps bounds the gap a head run joins across, in steps of its
// series. A gap the run spans and a write fills later (a batch that a
// concurrent writer's overtook) costs that write look-ups and a point
// entry per point, which a run kept apart would have spared (it fills
// the gap as a run of its own); a run kept apart at every gap costs a
// run key per point where a series' points arrive with holes: refused
// writes that are never sent again, samples a collector skipped.
// Offered four times what it could commit, the server refused half the
// writes, every series had holes of 3 steps and more, and at 2 steps
// the head stored 0.25 run keys per line (0.036 at the sustained rate);
// at 16, 0.14 keys per line in all, and 30 % more lines acknowledged. A
// writer's batch of a time-ordered stream spans more steps than that
// (TSBS's 5,000-line batches about 50 per series), so concurrent
// loaders still fill their gaps as runs.
const maxJoinSteps = 16

// maxOverRunEntries bounds an overwrite run (a retention sweep decodes
// one whole).
const maxOverRunEntries = 1024

// Head record flags, per run.
const (
	headJoins     = 1 // the run joins the series' last head run
	headInOrder   = 2 // the run's points were above the series' stored maximum
	headOverwrite = 4 // not a run: the fragments of the block that overwrote points (appendHeadOver)
	// headSingle (layout 8) marks a run of one point, a series' one point
	// in the block (the common load: many series, a point each per
	// commit): its section ends with the point's uvarint block index in
	// place of a body's length, count and time delta. Readers see the
	// body and flags of the plain section.
	headSingle = 8
	// headFrag (layout 10) marks a run of one point whose series and time
	// are those of the block's fragment it names: the section is its
	// flags and the zig-zag varint change of that fragment's index from
	// the previous headFrag section's (the first from 0), nothing else.
	// Readers resolve the fragment (recordReader.frag) and see the body
	// and flags of the plain section.
	headFrag = 16
)

// headKey is 'k' tid n: the table's n-th head record.
func headKey(tid, n uint64) []byte { return tableKey(ksHead, tid, n) }

// before returns the series' head run with the greatest first time at or
// below ts and the first time of the head run after it (math.MaxInt64
// when none).
func (h *tableHead) before(sid uint64, ts int64) (*headRun, int64) {
	if h == nil {
		return nil, math.MaxInt64
	}
	runs := h.series[sid]
	i := sort.Search(len(runs), func(i int) bool { return runs[i].ents[0].ts > ts })
	next := int64(math.MaxInt64)
	if i < len(runs) {
		next = runs[i].ents[0].ts
	}
	if i == 0 {
		return nil, next
	}
	return runs[i-1], next
}

// top is the series' last head run (nil when none).
func (h *tableHead) top(sid uint64) *headRun {
	if h == nil {
		return nil
	}
	runs := h.series[sid]
	if len(runs) == 0 {
		return nil
	}
	return runs[len(runs)-1]
}

// runTop is what joining a run needs of a series' last head run: its
// last time, step and length, and whether another run may join it (an
// in-order run naming x_seqs).
type runTop struct {
	last, step int64
	n          int
	open       bool
}

// topOf is the series' last head run as a runTop.
func (h *tableHead) topOf(sid uint64) runTop {
	r := h.top(sid)
	if r == nil {
		return runTop{}
	}
	return runTop{last: r.last(), step: r.step, n: len(r.ents), open: r.inOrder && r.kind == 'L'}
}

// join reports whether in-order run rb of kind may extend prev, the
// series' last head run, and returns the series' last run after rb is
// added. It may when both name x_seqs, prev is in order too (it ended at
// the series' stored maximum, so nothing of the series lies between
// them), the joined run stays within maxHeadRunEntries, and the time
// between them is at most maxJoinSteps times the series' step (the
// smallest between two of its points so far).
func (prev runTop) join(kind byte, rb *runBuilder) (runTop, bool) {
	next := runTop{last: rb.ts[len(rb.ts)-1], step: rb.step(), n: len(rb.ts), open: kind == 'L'}
	if !prev.open || kind != 'L' || prev.n+len(rb.ts) > maxHeadRunEntries {
		return next, false
	}
	step := minStep(prev.step, next.step)
	if step != 0 && rb.firstTs-prev.last > maxJoinSteps*step {
		return next, false
	}
	next.step, next.n = minStep(step, rb.firstTs-prev.last), prev.n+len(rb.ts)
	return next, true
}

// minStep is the smaller of two steps, 0 meaning none yet.
func minStep(a, b int64) int64 {
	if a == 0 || (b != 0 && b < a) {
		return b
	}
	return a
}

// A head record (layout 7) is a zero byte, the kind of its block's
// references ('L' synced, 'U' unsynced), uvarint base (the block's first
// x_seq or its number) and one section per run or series of overwrites:
// varint series delta and varint first-time delta (from the section
// before, the first from 0), flags, uvarint length and the section's
// body: a run's body (runBuilder.appendBody) or the overwrites
// (appendHeadOver). Layout 8 ends a run of one point with its uvarint
// block index instead (headSingle): 3 bytes less for each series written
// one point per commit, about a third of such a record. A layout 6
// record (no leading zero: no series has id 0) held the absolute series
// and first time, and each body began with the kind and base; Open
// replays such records as they are.
//
// A layout 10 record begins with two zero bytes (no kind is 0), and each
// section with its flags: a run of one point then names its fragment in
// the block (headFrag), whose series and time the reader takes from the
// block, 2 bytes where a layout 8 section took about 7; other sections
// go on as in layout 7 (series and first-time deltas, then the length
// and body, or the block index of headSingle). A commit of one point per
// series, the common load, so writes about 2 bytes per point: under
// valueThreshold for up to about 250 points, its record stays in the LSM
// tree, and the flush's deletion drops it there, where a layout 8 record
// went to the value log and stayed as garbage among live blocks
// (doc.go, "Bytes per line").
const recordCompact = 0

// recordFlagsFirst, after recordCompact, marks a layout 10 record.
const recordFlagsFirst = 0

// headWriter appends the sections of a head record (layout 10).
type headWriter struct {
	rec     []byte
	body    []byte // scratch space for a run's body, reused across runs
	sid     uint64
	firstTs int64
	fragIdx uint64 // the block index of the last headFrag section
}

// newHeadWriter begins the record of a block of kind and base.
func newHeadWriter(kind byte, base uint64) headWriter {
	return headWriter{rec: binary.AppendUvarint([]byte{recordCompact, recordFlagsFirst, kind}, base)}
}

func (w *headWriter) section(sid uint64, firstTs int64, flags byte) {
	w.rec = append(w.rec, flags)
	w.rec = binary.AppendVarint(w.rec, int64(sid-w.sid))
	w.rec = binary.AppendVarint(w.rec, firstTs-w.firstTs)
	w.sid, w.firstTs = sid, firstTs
}

// appendRun appends one run, rb's indexes naming fragments of the
// record's block whose series and times are rb's.
func (w *headWriter) appendRun(rb *runBuilder, flags byte) {
	if len(rb.ts) == 1 && rb.ts[0] == rb.firstTs {
		w.rec = append(w.rec, flags|headFrag)
		w.rec = binary.AppendVarint(w.rec, int64(rb.idx[0]-w.fragIdx))
		w.sid, w.firstTs, w.fragIdx = rb.sid, rb.firstTs, rb.idx[0]
		return
	}
	w.section(rb.sid, rb.firstTs, flags)
	w.body = rb.appendBody(w.body[:0])
	w.rec = binary.AppendUvarint(w.rec, uint64(len(w.body)))
	w.rec = append(w.rec, w.body...)
}

// overwrite is a fragment that overwrote a point, as a commit places
// it: its time, index in the block and the point's entry with it.
type overwrite struct {
	ts    int64
	idx   uint64
	entry []byte
}

// appendOver appends the overwrites of series sid in one block (ows in
// ascending time, a point's in block order). Their body is uvarint count
// and per fragment the uvarint time delta, uvarint block index, uvarint
// entry length and the entry.
func (w *headWriter) appendOver(sid uint64, ows []overwrite) {
	size := binary.MaxVarintLen64
	for _, o := range ows {
		size += 3*binary.MaxVarintLen64 + len(o.entry)
	}
	v := binary.AppendUvarint(make([]byte, 0, size), uint64(len(ows)))
	prev := ows[0].ts
	for _, o := range ows {
		v = binary.AppendUvarint(v, uint64(o.ts-prev))
		v = binary.AppendUvarint(v, o.idx)
		v = binary.AppendUvarint(v, uint64(len(o.entry)))
		v = append(v, o.entry...)
		prev = o.ts
	}
	w.section(sid, ows[0].ts, headOverwrite)
	w.rec = binary.AppendUvarint(w.rec, uint64(len(v)))
	w.rec = append(w.rec, v...)
}

// scanHeadOver calls fn with each overwrite of an overwrite section's
// body v (appendOver) in a block of kind and base, its reference and
// entry aliasing v.
func scanHeadOver(kind byte, base uint64, v []byte, firstTs int64, fn func(ts int64, r ref, entry []byte)) error {
	count, n := binary.Uvarint(v)
	if n <= 0 || count == 0 || count > uint64(len(v)) {
		return errShort
	}
	v = v[n:]
	ts := firstTs
	for range count {
		var vals [3]uint64
		for i := range vals {
			if vals[i], n = binary.Uvarint(v); n <= 0 {
				return errShort
			}
			v = v[n:]
		}
		if vals[2] > uint64(len(v)) {
			return errShort
		}
		ts += int64(vals[0])
		r := ref{block: base, idx: vals[1]}
		if kind == 'L' {
			r = ref{seq: base + vals[1]}
		}
		fn(ts, r, v[:vals[2]])
		v = v[vals[2]:]
	}
	if len(v) != 0 {
		return errShort
	}
	return nil
}

// recordReader walks the sections of a head record of any layout.
type recordReader struct {
	rec        []byte
	compact    bool
	flagsFirst bool // layout 10
	kind       byte
	base       uint64
	sid        uint64
	firstTs    int64
	fragIdx    uint64
	// frag resolves a headFrag section: the series and time of the
	// fragment at index idx of the record's block. nil: such a section is
	// an error.
	frag fragSource
	// single holds the body of a headSingle or headFrag section, rebuilt.
	single [2 + binary.MaxVarintLen64]byte
}

// fragSource returns the series and time of the fragment at index idx
// of a head record's block.
type fragSource func(idx uint64) (sid uint64, ts int64, err error)

// fragmentsSource is the fragSource of a block being committed.
func fragmentsSource(frags []store.Fragment) fragSource {
	return func(idx uint64) (uint64, int64, error) {
		if idx >= uint64(len(frags)) {
			return 0, 0, errShort
		}
		return frags[idx].Series, frags[idx].Time, nil
	}
}

// newRecordReader reads rec, resolving its headFrag sections with frag.
func newRecordReader(rec []byte, frag fragSource) (recordReader, error) {
	if len(rec) == 0 || rec[0] != recordCompact {
		return recordReader{rec: rec}, nil // layout 6
	}
	rest := rec[1:]
	flagsFirst := len(rest) > 0 && rest[0] == recordFlagsFirst
	if flagsFirst {
		rest = rest[1:]
	}
	kind, base, rest, dod, err := runHeader(rest)
	if err == nil && dod {
		err = errRecordDoD
	}
	return recordReader{rec: rest, compact: true, flagsFirst: flagsFirst, kind: kind, base: base, frag: frag}, err
}

// block is a reference to the first fragment of the record's block
// (layouts 7 and later).
func (r *recordReader) block() ref {
	if r.kind == 'L' {
		return ref{seq: r.base}
	}
	return ref{block: r.base}
}

// errRecordDoD reports a head record whose kind claims a body of deltas of
// deltas, which only run values hold.
var errRecordDoD = errors.New("head record: a run value's kind")

// next returns the next section: its series, first time, flags, the kind
// and base of its block and its body (aliasing the record, or r's own
// memory until the next call for a headSingle or headFrag section, whose
// flags and body are those of the plain section). done is true after the
// last one.
func (r *recordReader) next() (sid uint64, firstTs int64, flags byte, kind byte, base uint64, body []byte, done bool, err error) {
	if len(r.rec) == 0 {
		return 0, 0, 0, 0, 0, nil, true, nil
	}
	b := r.rec
	var n int
	if r.flagsFirst {
		flags = b[0]
		b = b[1:]
		if flags&headFrag != 0 {
			d, n := binary.Varint(b)
			if n <= 0 || r.frag == nil {
				return 0, 0, 0, 0, 0, nil, false, errShort
			}
			idx := r.fragIdx + uint64(d)
			if sid, firstTs, err = r.frag(idx); err != nil {
				return 0, 0, 0, 0, 0, nil, false, err
			}
			r.rec = b[n:]
			r.sid, r.firstTs, r.fragIdx = sid, firstTs, idx
			body = binary.AppendUvarint(append(r.single[:0], 1, 0), idx)
			return sid, firstTs, flags &^ headFrag, r.kind, r.base, body, false, nil
		}
	}
	if r.compact {
		var ds int64
		if ds, n = binary.Varint(b); n <= 0 {
			return 0, 0, 0, 0, 0, nil, false, errShort
		}
		sid = r.sid + uint64(ds)
	} else if sid, n = binary.Uvarint(b); n <= 0 {
		return 0, 0, 0, 0, 0, nil, false, errShort
	}
	b = b[n:]
	if firstTs, n = binary.Varint(b); n <= 0 {
		return 0, 0, 0, 0, 0, nil, false, errShort
	}
	if r.compact {
		firstTs += r.firstTs
	}
	b = b[n:]
	if !r.flagsFirst {
		if len(b) == 0 {
			return 0, 0, 0, 0, 0, nil, false, errShort
		}
		flags, b = b[0], b[1:]
	}
	if r.compact && flags&headSingle != 0 {
		idx, n := binary.Uvarint(b)
		if n <= 0 {
			return 0, 0, 0, 0, 0, nil, false, errShort
		}
		r.rec = b[n:]
		r.sid, r.firstTs = sid, firstTs
		// The plain body: count 1, time delta 0, the index.
		body = binary.AppendUvarint(append(r.single[:0], 1, 0), idx)
		return sid, firstTs, flags &^ headSingle, r.kind, r.base, body, false, nil
	}
	l, n := binary.Uvarint(b)
	if n <= 0 || uint64(len(b)-n) < l {
		return 0, 0, 0, 0, 0, nil, false, errShort
	}
	body = b[n : n+int(l)]
	r.rec = b[n+int(l):]
	r.sid, r.firstTs = sid, firstTs
	if r.compact {
		return sid, firstTs, flags, r.kind, r.base, body, false, nil
	}
	kind, base, body, dod, err := runHeader(body)
	if err == nil && dod {
		err = errRecordDoD
	}
	return sid, firstTs, flags, kind, base, body, false, err
}

// unionCount is the fragment count of a union entry (0 when v is not one).
func unionCount(v []byte) uint64 {
	if len(v) < 2 || v[0] != entryUnion {
		return 0
	}
	c, n := binary.Uvarint(v[1:])
	if n <= 0 {
		return 0
	}
	return c
}

// applyHead adds the runs and overwrites of head record rec (key k) to
// st's head and counts their entries. Each overwrite's entry becomes the
// point's entry in memory (st.dups), the latest record winning: a commit
// applies its records once durable (owned: the strings share rec's bytes,
// which nothing writes again), Open the records it replays (copied out of
// badger). frag resolves the record's headFrag sections from its block.
// A point absent from st.dups became overwritten in this head.
func (db *Engine) applyHead(st *tableState, k, rec []byte, owned bool, frag fragSource) error {
	st.dupMu.Lock()
	added, newDups, err := st.head.apply(k, rec, frag, func(id pointID, entry []byte) {
		e := string(entry)
		if owned {
			e = unsafe.String(unsafe.SliceData(entry), len(entry))
		}
		if _, ok := st.dups[id]; !ok {
			st.head.fresh = append(st.head.fresh, id)
		}
		st.dups[id] = e
	})
	st.dupMu.Unlock()
	db.mu.Lock()
	st.head.entries += added
	st.head.bytes += int64(len(rec))
	st.head.newDups += newDups
	db.mu.Unlock()
	return err
}

// apply adds the runs and overwrites of head record rec (key k) to h but
// for its counts and its fresh points; each overwrite's point and entry
// are passed to entry, which may add the point to h.fresh. frag resolves
// headFrag sections. It returns how many entries it added and how many
// points entry added to h.fresh.
func (h *tableHead) apply(k, rec []byte, frag fragSource, entry func(id pointID, entry []byte)) (added, newDups int, err error) {
	if h.series == nil {
		h.series = map[uint64][]*headRun{}
		h.over = map[uint64][]runEntry{}
	}
	fresh := len(h.fresh)
	defer func() { newDups = len(h.fresh) - fresh }()
	rr, err := newRecordReader(rec, frag)
	if err != nil {
		return 0, 0, &store.CorruptionError{Key: k, Err: err}
	}
	for {
		sid, first, flags, kind, base, v, done, err := rr.next()
		if err != nil {
			return added, newDups, &store.CorruptionError{Key: k, Err: err}
		}
		if done {
			break
		}
		if flags&headOverwrite != 0 {
			over := h.over[sid]
			err := scanHeadOver(kind, base, v, first, func(ts int64, r ref, e []byte) {
				over = append(over, runEntry{ts: ts, r: r})
				entry(pointID{sid, ts}, e)
				added++
			})
			h.over[sid] = over
			if err != nil {
				return added, newDups, &store.CorruptionError{Key: k, Err: err}
			}
			continue
		}
		runs := h.series[sid]
		if flags&headJoins != 0 && len(runs) > 0 {
			// The run joins the series' last: decoded onto its entries,
			// its steps and the one between them folded into its step.
			top := runs[len(runs)-1]
			n := len(top.ents)
			ents, err := appendRunBody(top.ents, kind, base, v, first, false)
			if err != nil || len(ents) == n {
				return added, newDups, &store.CorruptionError{Key: k, Err: errors.Join(err, errShort)}
			}
			for i := n; i < len(ents); i++ {
				top.step = minStep(top.step, ents[i].ts-ents[i-1].ts)
			}
			top.ents = ents
			added += len(ents) - n
			continue
		}
		ents, err := decodeRunBody(kind, base, v, first, false)
		if err != nil || len(ents) == 0 {
			return added, newDups, &store.CorruptionError{Key: k, Err: errors.Join(err, errShort)}
		}
		added += len(ents)
		step := int64(0)
		for i := 1; i < len(ents); i++ {
			step = minStep(step, ents[i].ts-ents[i-1].ts)
		}
		r := &headRun{kind: kind, inOrder: flags&headInOrder != 0, step: step, ents: ents}
		if r.kind == 'U' {
			r.block = ents[0].r.block
		}
		i := sort.Search(len(runs), func(i int) bool { return runs[i].ents[0].ts > first })
		runs = append(runs, nil)
		copy(runs[i+1:], runs[i:])
		runs[i] = r
		h.series[sid] = runs
	}
	h.records = append(h.records, k)
	return added, newDups, nil
}

// encode renders r as a run value (runBuilder.encode).
func (r *headRun) encode() []byte {
	rb := runBuilder{firstTs: r.ents[0].ts, ts: make([]int64, 0, len(r.ents)), idx: make([]uint64, 0, len(r.ents))}
	base := r.block
	if r.kind == 'L' {
		base = r.ents[0].r.seq
	}
	for _, e := range r.ents {
		idx := e.r.idx
		if r.kind == 'L' {
			idx = e.r.seq - base
		}
		rb.add(e.ts, idx)
	}
	return rb.encode(r.kind, base)
}

// heads is what a commit's look-ups consult of a table's heads: the live
// one and the sealed one a background flush is storing (nil when none).
type heads struct{ live, sealed *tableHead }

// before returns the series' head run with the greatest first time at or
// below ts in either head and the least first time above ts
// (math.MaxInt64 when none).
func (h heads) before(sid uint64, ts int64) (*headRun, int64) {
	r, next := h.live.before(sid, ts)
	s, snext := h.sealed.before(sid, ts)
	if r == nil || (s != nil && s.ents[0].ts > r.ents[0].ts) {
		r = s
	}
	return r, min(next, snext)
}

// last returns the series' highest time in either head (ok false when
// neither holds the series).
func (h heads) last(sid uint64) (ts int64, ok bool) {
	ts = math.MinInt64
	for _, r := range []*headRun{h.live.top(sid), h.sealed.top(sid)} {
		if r != nil {
			ts, ok = max(ts, r.last()), true
		}
	}
	return ts, ok
}

// headSize is the number of run entries and the bytes of head records
// every table's live heads hold, and their sealed ones too when sealed
// is set.
func (db *Engine) headSize(sealed bool) (entries int, bytes int64) {
	db.mu.Lock()
	defer db.mu.Unlock()
	for _, st := range db.tables {
		entries += st.head.entries
		bytes += st.head.bytes
		if sealed && st.sealed != nil {
			entries += st.sealed.entries
			bytes += st.sealed.bytes
		}
	}
	return entries, bytes
}

// headFlush is a flush of sealed heads, run by storeHeads in the
// background (startFlush) or inline (flushHeads).
type headFlush struct {
	sts  []*tableState
	tids []uint64
	done chan struct{} // closed when storeHeads returned, err set
	err  error
}

// seal makes every table's live head with entries or records its sealed
// head, starts empty live heads and returns the flush that is to store
// them (nil when there is nothing to store). No flush may be in progress.
// Writer only.
func (db *Engine) seal() *headFlush {
	f := &headFlush{done: make(chan struct{})}
	db.mu.Lock()
	defer db.mu.Unlock()
	for tid, st := range db.tables {
		if st.head.entries > 0 || len(st.head.records) > 0 {
			st.storing(&st.head)
			sealed := st.head
			st.sealed, st.head = &sealed, tableHead{}
			f.sts, f.tids = append(f.sts, st), append(f.tids, tid)
		}
	}
	if len(f.sts) == 0 {
		return nil
	}
	db.flush = f
	return f
}

// storing raises the stored bound (seriesMax) of every series of h, a
// head about to be sealed, to its highest time: from now on lookups may
// find its runs and point entries in the tree. Writer only.
func (st *tableState) storing(h *tableHead) {
	raise := func(sid uint64) {
		if m, ok := st.maxTs[sid]; ok && m.stored < m.all {
			m.stored = m.all
			st.maxTs[sid] = m
		}
	}
	for sid := range h.series {
		raise(sid)
	}
	for sid := range h.over {
		raise(sid)
	}
}

// startFlush seals the live heads and stores them in the background,
// while commits go on into new live heads: look-ups consult both until
// the flush has ended and the next commit's view sees its run keys
// (reapFlush). A flush still in progress is waited for first, which
// bounds the heads' memory at twice Config.HeadMaxEntries. Writer only.
func (db *Engine) startFlush() error {
	if err := db.reapFlush(true); err != nil {
		return err
	}
	if f := db.seal(); f != nil {
		go func() {
			f.err = db.storeHeads(f)
			close(f.done)
		}()
	}
	return nil
}

// flushHeads stores every table's heads as run keys before it returns:
// a retention sweep walks stored runs, and Close leaves nothing to
// replay. Writer only.
func (db *Engine) flushHeads() error {
	if err := db.reapFlush(true); err != nil {
		return err
	}
	if f := db.seal(); f != nil {
		f.err = db.storeHeads(f)
		close(f.done)
	}
	return db.reapFlush(true)
}

// reapFlush ends the flush in progress once it is done (at once unless
// wait, which waits for it): the sealed heads it stored go, the next
// look-up view seeing their run keys. A flush that failed leaves the
// store's records in place for Open to replay and its error sticks:
// every later commit returns it, as the heads no longer match what is
// stored. Writer only.
func (db *Engine) reapFlush(wait bool) error {
	f := db.flush
	if f == nil {
		return db.flushErr
	}
	if !wait {
		select {
		case <-f.done:
		default:
			return nil
		}
	}
	<-f.done
	db.flush = nil
	if f.err != nil {
		db.flushErr = fmt.Errorf("store the head's runs: %w", f.err)
		return db.flushErr
	}
	db.mu.Lock()
	for _, st := range f.sts {
		st.sealed = nil
	}
	db.mu.Unlock()
	db.headFlushes.Inc()
	return nil
}

// storeHeads writes every run of f's sealed heads as a run key, their
// overwrites as overwrite runs, the entries of the points they overwrote
// (and the overwrite markers of those overwritten for the first time),
// and deletes their head records, the records last, in the last
// transaction: a crash before leaves them, and Open rebuilds the same
// heads and writes the same keys again (overwrite runs may then be
// grouped otherwise and name a fragment twice, which retention and
// repairs tolerate). The sealed heads do not change while it runs.
func (db *Engine) storeHeads(f *headFlush) error {
	w := &committer{db: db, txn: db.bdb.NewTransaction(true), maxKeys: flushTxnKeys, flush: true}
	defer func() { w.txn.Discard() }()
	for i, st := range f.sts {
		h, tid := st.sealed, f.tids[i]
		for sid, runs := range h.series {
			for _, r := range runs {
				if err := w.set(pointKey(nil, ksRun, tid, sid, r.ents[0].ts), r.encode()); err != nil {
					return err
				}
			}
		}
		for sid, ents := range h.over {
			// In time order (a retention sweep's), a point's fragments
			// by reference: the head holds one sorted run per commit, and
			// a stable sort of them costs a merge per run.
			slices.SortFunc(ents, func(a, b runEntry) int {
				return cmp.Or(cmp.Compare(a.ts, b.ts), cmp.Compare(a.r.seq, b.r.seq), cmp.Compare(a.r.block, b.r.block), cmp.Compare(a.r.idx, b.r.idx))
			})
			for len(ents) > 0 {
				chunk := ents[:min(len(ents), maxOverRunEntries)]
				ents = ents[len(chunk):]
				k := overKey(tid, sid, chunk[0].ts, chunk[0].r)
				if err := w.set(k, appendOverRun(nil, chunk[0].ts, chunk)); err != nil {
					return err
				}
			}
		}
		if err := w.storeUnions(st, tid, h); err != nil {
			return err
		}
	}
	for _, st := range f.sts {
		for _, k := range st.sealed.records {
			if err := w.delete(k); err != nil {
				return err
			}
		}
	}
	if err := w.txn.Commit(); err != nil {
		return err
	}
	db.flushGen.Add(1)
	return nil
}

// storeUnions writes the entry of every point sealed head h overwrote as
// st.dups holds it now (h.over sorted by time): the union the head's last
// commit left, or a later commit's, which is as durable (dups holds only
// entries of durable commits) and whose head record a crash replays on
// top of it. A point gone from dups (a retention sweep dropped it) gets
// none. The points h saw overwritten first get their overwrite markers.
func (w *committer) storeUnions(st *tableState, tid uint64, h *tableHead) error {
	// The entries are gathered under the lock and written after it: a
	// write may commit a full transaction, which the writer's next
	// applyHead must not wait for.
	type union struct {
		id    pointID
		entry string
	}
	var unions []union
	st.dupMu.RLock()
	for sid, ents := range h.over {
		for i, e := range ents {
			if i > 0 && ents[i-1].ts == e.ts {
				continue
			}
			if entry := st.dups[pointID{sid, e.ts}]; entry != "" {
				unions = append(unions, union{pointID{sid, e.ts}, entry})
			}
		}
	}
	st.dupMu.RUnlock()
	for _, u := range unions {
		if err := w.set(pointKey(nil, ksPoint, tid, u.id.sid, u.id.ts), []byte(u.entry)); err != nil {
			return err
		}
	}
	// An entry applyHead took from a commit's head record shares the
	// record's bytes: once the head that holds the record is gone, the
	// entry alone would keep the whole record in memory
	// (Config.HeadMaxBytes bounds the heads, not what outlives them).
	// Each is copied out, unless a later commit replaced it meanwhile.
	st.dupMu.Lock()
	for _, u := range unions {
		if cur, ok := st.dups[u.id]; ok && unsafe.StringData(cur) == unsafe.StringData(u.entry) {
			st.dups[u.id] = strings.Clone(cur)
		}
	}
	st.dupMu.Unlock()
	for _, id := range h.fresh {
		if err := w.set(pointKey(nil, ksDup, tid, id.sid, id.ts), nil); err != nil {
			return err
		}
	}
	return nil
}

// loadHeads rebuilds every table's head from the head records Open finds
// and sets the next record number above them. A record's block, which
// its headFrag sections name, is read when one is met: Open has voided
// the records of blocks a crash kept from being stored (upgrade).
func (db *Engine) loadHeads() error {
	return db.bdb.View(func(txn *badger.Txn) error {
		fetchers := map[uint64]*fetcher{} // by table: a fetcher reads one table's blocks
		defer func() {
			for _, f := range fetchers {
				f.close()
			}
		}()
		it := txn.NewIterator(badger.IteratorOptions{Prefix: []byte{ksHead}, PrefetchValues: true})
		defer it.Close()
		for it.Rewind(); it.Valid(); it.Next() {
			item := it.Item()
			k := item.KeyCopy(nil)
			if len(k) != 17 {
				return &store.CorruptionError{Key: k, Err: errShort}
			}
			tid, n := binary.BigEndian.Uint64(k[1:9]), binary.BigEndian.Uint64(k[9:])
			db.headSeq = max(db.headSeq, n+1)
			st := db.table(tid)
			fetch := fetchers[tid]
			if fetch == nil {
				fetch = &fetcher{}
				fetchers[tid] = fetch
			}
			err := item.Value(func(v []byte) error { // v is badger's, valid only here: copied
				return db.applyHead(st, k, v, false, storedFragSource(txn, fetch, tid, v))
			})
			if err != nil {
				return err
			}
		}
		return nil
	})
}

// storedFragSource resolves the headFrag sections of head record rec of
// table tid from its stored block, read at the first.
func storedFragSource(txn *badger.Txn, fetch *fetcher, tid uint64, rec []byte) fragSource {
	var rd *blockReader
	return func(idx uint64) (uint64, int64, error) {
		if rd == nil {
			r, err := headRecordBlock(rec)
			if err != nil {
				return 0, 0, err
			}
			b, _, found, err := fetch.block(txn, tid, r)
			if err != nil {
				return 0, 0, err
			}
			if !found {
				return 0, 0, fmt.Errorf("head record of a block not stored: %w", errShort)
			}
			rd = &b.rd
		}
		if err := rd.seek(idx); err != nil {
			return 0, 0, err
		}
		return rd.head()
	}
}
