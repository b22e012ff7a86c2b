package jsstore

import (
	"context"
	"errors"
	"math"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/ingestd/ingestd/store"
)

// maxAgeEntries bounds a table's ageIndex: past it every other entry is
// dropped, which only makes a purge stop earlier.
const maxAgeEntries = 1 << 14

// ageEntry says: every message of the live instance up to stream
// sequence seq holds only fragments older than newest+1 (Unix
// nanoseconds; the running maximum of their times); xseq is the highest
// x_seq numbered up to seq (the anchor of a purge there).
type ageEntry struct {
	seq, xseq uint64
	newest    int64
}

// ageIndex is a table's live-instance messages in stream order, as
// running maxima of their fragments' times: where a purge below a
// retention cutoff may stop. Guarded by the table's f.fmu.
type ageIndex struct {
	entries []ageEntry
	newest  int64 // the running maximum so far
}

// add records the message at seq holding frags, numbered up to xseq
// (none: a message of new series only, which changes nothing).
func (a *ageIndex) add(seq, xseq uint64, frags []store.Fragment) {
	if len(frags) == 0 {
		return
	}
	if len(a.entries) == 0 {
		a.newest = math.MinInt64
	}
	for i := range frags {
		a.newest = max(a.newest, frags[i].Time)
	}
	if n := len(a.entries); n > 0 && a.entries[n-1].newest == a.newest {
		a.entries[n-1].seq, a.entries[n-1].xseq = seq, xseq
		return
	}
	if len(a.entries) == maxAgeEntries {
		kept := a.entries[:0]
		for i := 1; i < len(a.entries); i += 2 {
			kept = append(kept, a.entries[i])
		}
		a.entries = kept
	}
	a.entries = append(a.entries, ageEntry{seq: seq, xseq: xseq, newest: a.newest})
}

// below returns the entry up to which every message is older than cutoff
// and how many entries lead to it (0: none).
func (a *ageIndex) below(cutoff int64) (e ageEntry, n int) {
	for n < len(a.entries) && a.entries[n].newest < cutoff {
		e = a.entries[n]
		n++
	}
	return e, n
}

// trimTo forgets the entries up to stream sequence seq (their messages
// were purged).
func (a *ageIndex) trimTo(seq uint64) {
	n := 0
	for n < len(a.entries) && a.entries[n].seq <= seq {
		n++
	}
	a.entries = append(a.entries[:0], a.entries[n:]...)
}

// timers are the purges of ended instances waiting for their grace
// (endInstance); Close stops them.
type timers struct {
	mu      sync.Mutex
	pending map[*time.Timer]struct{}
	stopped bool
}

// after runs f in its own goroutine once d has passed, unless stop comes
// first.
func (ts *timers) after(d time.Duration, f func()) {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	if ts.stopped {
		return
	}
	if ts.pending == nil {
		ts.pending = map[*time.Timer]struct{}{}
	}
	var tm *time.Timer
	tm = time.AfterFunc(d, func() {
		ts.mu.Lock()
		_, ok := ts.pending[tm]
		delete(ts.pending, tm)
		ts.mu.Unlock()
		if ok {
			f()
		}
	})
	ts.pending[tm] = struct{}{}
}

// stop cancels the functions not started yet; after it, after does
// nothing.
func (ts *timers) stop() {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	ts.stopped = true
	for tm := range ts.pending {
		tm.Stop()
	}
	clear(ts.pending)
}

// duePurge is a purge of a table's subject up to stream sequence seq,
// which the record's anchor covers since at.
type duePurge struct {
	seq uint64
	at  time.Time
}

// purgeAged plans the removal from t's subject of the messages a
// complete sweep at cutoff left nothing of (every fragment older than
// cutoff), once at least Config.PurgeMinMessages stream sequences are
// behind that point, and makes the purge planned before once it is due.
// The messages may hold the first use of series still in use, so it
// first publishes the instance's whole series dictionary (a message of
// series only) at the end of the stream, then moves the record's anchor
// to the last message to purge (where every node numbers alike); the
// purge follows Config.PurgeGrace later (purgeDue), so that every node's
// follower knows the anchor before a message after it can reach it
// without the ones before (a follower of one subject sees no gap). A
// crash between leaves a second copy of the dictionary, which a rebuild
// applies as the same entries, or messages below the anchor, which a
// rebuild skips and a later plan purges. Sweeps only (one at a time).
func (s *Store) purgeAged(t *table, cutoff int64) error {
	if err := s.purgeDue(t); err != nil || t.due.seq != 0 {
		return err
	}
	s.mu.Lock()
	tid := t.rec.Meta.ID
	s.mu.Unlock()
	t.f.fmu.Lock()
	at, n := t.ages.below(cutoff)
	t.f.fmu.Unlock()
	upto := at.seq
	purged := t.purged.Load()
	if n == 0 || upto < purged+uint64(s.cfg.PurgeMinMessages) {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	series, err := s.cache.LoadSeries(ctx, tid)
	if err != nil {
		return err
	}
	if len(series) > 0 {
		snapshot := store.TableCommit{TableID: tid, NewSeries: series, CommitTime: time.Now().UnixNano()}
		j, err := s.prepare(t, &snapshot, idDictionary)
		if err != nil {
			return err
		}
		if err := s.publish([]*publishJob{&j}); err != nil {
			return err
		}
	}
	err = s.update(t, func(r *record) error {
		if !r.live() || r.Meta.ID != tid {
			return errVoid // ended meanwhile: its end purges
		}
		if r.Anchor == nil || r.Anchor.Seq < upto {
			r.Anchor = &anchor{Seq: upto, XSeq: at.xseq}
		}
		return nil
	})
	if errors.Is(err, errVoid) {
		return nil
	}
	if err != nil {
		return err
	}
	t.due = duePurge{seq: upto, at: time.Now()}
	return s.purgeDue(t)
}

// purgeDue purges t's subject up to the planned sequence once
// Config.PurgeGrace has passed since the record's anchor covered it.
// Sweeps only.
func (s *Store) purgeDue(t *table) error {
	d := t.due
	if d.seq == 0 || time.Since(d.at) < s.cfg.PurgeGrace {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	stream, err := s.js.Stream(ctx, t.stream)
	if err != nil {
		return err
	}
	if err := stream.Purge(ctx, jetstream.WithPurgeSubject(t.subject), jetstream.WithPurgeSequence(d.seq+1)); err != nil {
		return err
	}
	if purged := t.purged.Load(); d.seq > purged {
		s.m.purged.Add(float64(d.seq - purged))
		t.purged.Store(d.seq)
	}
	t.due = duePurge{}
	t.f.fmu.Lock()
	t.ages.trimTo(d.seq)
	t.f.fmu.Unlock()
	return nil
}
