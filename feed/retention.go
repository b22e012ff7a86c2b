package feed

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/ingestd/ingestd/store"
)

// MinRetention is the shortest retention a table may have (0 means
// forever).
const MinRetention = time.Second

// MaxRetention is the longest: about 290 years, Go's time.Duration range.
const MaxRetention = time.Duration(math.MaxInt64)

// ParseRetention reads a retention: "0" or "INF" (forever), a Go duration
// ("720h", "90m") or InfluxDB's duration literals with days and weeks
// ("30d", "2w", "1d12h"). A retention must be 0 or within
// MinRetention..MaxRetention; anything else is ErrInvalidRetention.
func ParseRetention(s string) (time.Duration, error) {
	in := strings.TrimSpace(s)
	if in == "0" || strings.EqualFold(in, "inf") {
		return 0, nil
	}
	var total time.Duration
	rest := in
	for rest != "" {
		i := 0
		for i < len(rest) && rest[i] >= '0' && rest[i] <= '9' {
			i++
		}
		j := i
		for j < len(rest) && (rest[j] < '0' || rest[j] > '9') {
			j++
		}
		unit := map[string]time.Duration{"ns": time.Nanosecond, "us": time.Microsecond, "µs": time.Microsecond, "ms": time.Millisecond,
			"s": time.Second, "m": time.Minute, "h": time.Hour, "d": 24 * time.Hour, "w": 7 * 24 * time.Hour}[rest[i:j]]
		n, err := strconv.ParseInt(rest[:i], 10, 64)
		if i == 0 || unit == 0 || err != nil || n > int64(MaxRetention/unit) || total > MaxRetention-time.Duration(n)*unit {
			return 0, fmt.Errorf("%w: %s (a duration such as 30d, 12h, 1w, or 0 / INF for forever)", ErrInvalidRetention, QuoteInput(s))
		}
		total += time.Duration(n) * unit
		rest = rest[j:]
	}
	if total < MinRetention {
		return 0, fmt.Errorf("%w: %s is shorter than %s (use 0 to keep rows forever)", ErrInvalidRetention, QuoteInput(s), MinRetention)
	}
	return total, nil
}

// FormatRetention renders a retention as ParseRetention reads it: "0" for
// forever, else days (weeks when the days are whole weeks), hours,
// minutes and seconds ("30d", "2w", "1d12h"), with Go's rendering for
// anything finer than a second.
func FormatRetention(d time.Duration) string {
	if d == 0 {
		return "0"
	}
	if d%time.Second != 0 {
		return d.String()
	}
	const day, week = 24 * time.Hour, 7 * 24 * time.Hour
	weeks := time.Duration(0)
	if (d/day)%7 == 0 {
		weeks = week // whole weeks: "2w", not "14d"
	}
	var b strings.Builder
	for _, u := range []struct {
		unit time.Duration
		name string
	}{{weeks, "w"}, {day, "d"}, {time.Hour, "h"}, {time.Minute, "m"}, {time.Second, "s"}} {
		if u.unit == 0 {
			continue
		}
		if n := d / u.unit; n > 0 {
			b.WriteString(strconv.FormatInt(int64(n), 10))
			b.WriteString(u.name)
			d -= n * u.unit
		}
	}
	return b.String()
}

// retention returns t's retention in force. Sequencer goroutine only.
func (s *Sequencer) retention(t *table) time.Duration {
	if t.meta.Retention != nil {
		return time.Duration(*t.meta.Retention)
	}
	return s.cfg.DefaultRetention
}

// sweeper walks the live tables, one bounded step per sequencer turn (see
// Run): a retention batch, then the history trim, per table. Sequencer
// goroutine only.
type sweeper struct {
	// todo are the tables of the current pass not yet done; a table's
	// name stays first while it has more to do.
	todo []string
	// trimmed is set once the table first in todo has had its retention
	// batches and is at its history trim.
	trimmed bool
	// inflight is set while a step's store calls run on a goroutine of
	// their own (a shared store: sweepStep); done receives the step.
	inflight bool
	done     chan *sweepJob
}

// startPass queues every live table for a pass unless one is running.
func (sw *sweeper) startPass(s *Sequencer) {
	if len(sw.todo) > 0 {
		return
	}
	for _, t := range s.liveTables() {
		sw.todo = append(sw.todo, t.name)
	}
	sw.trimmed = false
}

// busy reports whether the pass has steps left.
func (sw *sweeper) busy() bool { return len(sw.todo) > 0 }

// ready reports whether the pass has a step to start now.
func (sw *sweeper) ready() bool { return sw.busy() && !sw.inflight }

// sweepJob is one sweep step: what the sequencer read for it
// (prepareSweep), then what its store calls found (runSweep), which the
// sequencer publishes (finishSweep).
type sweepJob struct {
	t    *table
	tid  uint64
	trim bool // the history trim, else a retention batch

	// A retention batch: retained says whether t has a retention, cutoff
	// its cutoff; res is the batch's result.
	retained bool
	cutoff   int64
	res      store.SweepResult
	took     time.Duration

	// The history trim: target is the highest horizon the watermark,
	// Config.FeedHistoryFragments and the consumers' holds allow (0:
	// nothing to trim), from the published horizon; since the oldest
	// commit time Config.FeedHistory keeps (when set). raised is the
	// horizon in force after it (0: not raised).
	target, horizon uint64
	since           int64
	hasSince        bool
	raised          uint64

	more bool
	err  error
}

// sweepStep runs one bounded step of the sweep pass: a retention batch
// or a history trim of the pass's current table. On a shared store the
// step's store calls (a bucket update, a stream purge: round trips) run
// on a goroutine of their own and the sequencer publishes the result
// when it comes (sweepStepped), writing meanwhile: a shared store takes
// sweeps and commits at once (store.Shared). It returns the storage
// error that must stop the sequencer.
func (s *Sequencer) sweepStep() error {
	sw := &s.sweep
	if !sw.ready() {
		return nil
	}
	t, ok := s.tables[sw.todo[0]]
	if !ok { // dropped since the pass began
		sw.next()
		return nil
	}
	j := s.prepareSweep(t, sw.trimmed)
	if s.shared != nil {
		sw.inflight = true
		done := sw.done
		go func() {
			s.runSweep(j)
			done <- j
		}()
		return nil
	}
	s.runSweep(j)
	return s.sweepStepped(j)
}

// sweepStepped publishes step j and moves the pass on.
func (s *Sequencer) sweepStepped(j *sweepJob) error {
	sw := &s.sweep
	sw.inflight = false
	more, err := s.finishSweep(j)
	if !j.trim {
		if !more {
			sw.trimmed = true // the trim follows
		}
	} else if !more {
		sw.next()
	}
	if err != nil && !errors.Is(err, errStorage) {
		// The store did not answer (ErrUnavailable): the table waits
		// for the next pass.
		s.logger.Warn("retention sweep of a table put off", "table", j.t.name, "err", err)
		sw.next()
		return nil
	}
	return err
}

// awaitSweep waits for a step whose store calls are in flight (Run's
// end: no store call after Run returns).
func (s *Sequencer) awaitSweep() {
	if s.sweep.inflight {
		<-s.sweep.done
		s.sweep.inflight = false
	}
}

// next moves to the pass's next table.
func (sw *sweeper) next() {
	sw.todo = sw.todo[1:]
	sw.trimmed = false
}

// prepareSweep reads what step trim (else a retention batch) of t needs
// of the sequencer's state. Sequencer goroutine only.
func (s *Sequencer) prepareSweep(t *table, trim bool) *sweepJob {
	j := &sweepJob{t: t, tid: t.meta.ID, trim: trim}
	if !trim {
		if ret := s.retention(t); ret != 0 {
			j.retained, j.cutoff = true, retentionCutoff(s.now(), ret)
		}
		return j
	}
	if !t.meta.Sync || s.cfg.FeedHistory == 0 && s.cfg.FeedHistoryFragments == 0 {
		return j
	}
	p := t.snapshot()
	target := p.watermark + 1 // every fragment up to the watermark may go
	if n := s.cfg.FeedHistoryFragments; n > 0 && p.watermark >= n {
		target = min(target, p.watermark-n+1)
	} else if n > 0 {
		target = 1
	}
	if hold, ok := s.hold(t, &p); ok {
		target = min(target, hold)
	}
	j.target, j.horizon = target, p.horizon
	if s.cfg.FeedHistory > 0 {
		j.since, j.hasSince = retentionCutoff(s.now(), s.cfg.FeedHistory), true
	}
	return j
}

// runSweep makes step j's store calls. It reads nothing of the
// sequencer's state but j: safe on any goroutine.
func (s *Sequencer) runSweep(j *sweepJob) {
	if !j.trim {
		if !j.retained {
			return
		}
		start := time.Now()
		j.res, j.err = s.st.SweepBefore(storeCtx, j.tid, j.cutoff, s.cfg.SweepBatchFragments)
		if j.err != nil {
			j.err = storageErr("retention sweep", j.err)
		}
		j.took, j.more = time.Since(start), j.res.More
		return
	}
	target := j.target
	if target <= j.horizon {
		return
	}
	if j.hasSince {
		seq, found, more, err := s.st.FirstSeqSince(storeCtx, j.tid, j.horizon, j.since, s.cfg.SweepBatchFragments)
		if err != nil {
			j.err = storageErr("find the history horizon", err)
			return
		}
		j.more = more
		if found || more {
			target = min(target, seq)
		}
		if target <= j.horizon {
			return
		}
	}
	// Only fragments this instance stores need the horizon: after a
	// TRUNCATE nothing below the new epoch's first fragment was ever
	// drainable in it, so nothing is trimmed.
	first, found, _, err := s.st.FirstSeqSince(storeCtx, j.tid, j.horizon, math.MinInt64, 1)
	if err != nil {
		j.err = storageErr("find the history horizon", err)
		return
	}
	if !found || first >= target {
		return
	}
	if j.raised, err = s.st.RaiseHorizon(storeCtx, j.tid, target); err != nil {
		j.err = storageErr("raise the history horizon", err)
	}
}

// finishSweep publishes what step j found, unless its table was replaced
// or dropped meanwhile (its instance is done with), and reports whether
// the table has more to look at. Sequencer goroutine only.
func (s *Sequencer) finishSweep(j *sweepJob) (bool, error) {
	if j.err != nil {
		return false, j.err
	}
	t := j.t
	if s.tables[t.name] != t {
		return false, nil
	}
	if !j.trim {
		if !j.retained {
			t.mu.Lock()
			t.pub.hasOldest = false
			t.mu.Unlock()
			return false, nil
		}
		s.m.sweepSeconds.Observe(j.took.Seconds())
		t.mu.Lock()
		t.pub.removed += uint64(j.res.Removed)
		if !j.res.More {
			t.pub.oldest, t.pub.hasOldest = j.res.Oldest, j.res.HasOldest
		}
		t.mu.Unlock()
		s.publishHorizon(t, j.res.Horizon, causeRetention)
		return j.more, nil
	}
	if j.raised != 0 {
		s.publishHorizon(t, j.raised, causeHistory)
	}
	return j.more, nil
}

// writeCutoff is the oldest time (Unix nanoseconds) a write to t may
// carry now: math.MinInt64 without retention. Sequencer goroutine only.
func (s *Sequencer) writeCutoff(t *table) int64 {
	ret := s.retention(t)
	if ret == 0 {
		return math.MinInt64
	}
	return retentionCutoff(s.now(), ret)
}

// retentionCutoff is the oldest time (Unix nanoseconds) a table with
// retention ret keeps at now: older rows are removed, older writes
// refused.
func retentionCutoff(now time.Time, ret time.Duration) int64 {
	n := now.UnixNano()
	if n < math.MinInt64+int64(ret) {
		return math.MinInt64
	}
	return n - int64(ret)
}

// hold returns the lowest horizon the named consumers of t hold
// (position + 1 of each consumer in the current epoch seen within
// Config.ConsumerHoldMaxAge), ok=false when none holds.
func (s *Sequencer) hold(t *table, p *published) (uint64, bool) {
	if !s.cfg.ConsumerHoldsHistory {
		return 0, false
	}
	now := s.now()
	h, ok := uint64(0), false
	for _, c := range t.consumers.list() {
		if s.holds(c, p.epoch, now) && (!ok || c.Position+1 < h) {
			h, ok = c.Position+1, true
		}
	}
	return h, ok
}

// holds reports whether consumer c holds its table's horizon at now.
func (s *registry) holds(c store.Consumer, epoch uint64, now time.Time) bool {
	return s.cfg.ConsumerHoldsHistory && c.Epoch == epoch && now.Sub(time.Unix(0, c.LastSeen)) <= s.cfg.ConsumerHoldMaxAge
}

// Horizon raise causes, the label of ingestd_feed_horizon_raises_total.
const (
	causeRetention = "retention"
	causeHistory   = "history"
)

// publishHorizon makes h t's published horizon when it is higher.
func (s *Sequencer) publishHorizon(t *table, h uint64, cause string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if h > t.pub.horizon {
		t.pub.horizon = h
		s.m.horizonRaises.WithLabelValues(cause).Inc()
	}
}

// loadHorizon reads a table instance's horizon at start-up.
func loadHorizon(st store.Sweeper, tid uint64) (uint64, error) {
	h, err := st.Horizon(storeCtx, tid)
	if err != nil {
		return 0, fmt.Errorf("load history horizon: %w", err)
	}
	return h, nil
}

// historyRefusal is the refusal of a drain below t's horizon.
func historyRefusal(st SyncStatus) error {
	return &RefusalError{Err: fmt.Errorf("%w (after is below horizon-1 = %d)", ErrHistoryExpired, st.Horizon-1), Status: st}
}

// isHistoryExpired reports a store read that found the history gone.
func isHistoryExpired(err error) bool { return errors.Is(err, store.ErrHistoryExpired) }
