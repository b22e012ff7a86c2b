package feed

import (
	"time"
)

// TableStats is what a table holds in the store (docs/reference.md#tables): see
// store.TableStats for how each figure is counted.
type TableStats struct {
	// Fragments is the number of stored fragments (exact).
	Fragments uint64
	// RowsEstimate estimates the distinct points: Fragments minus the
	// points written more than once (exact unless a point was written
	// three times or more; an upper bound).
	RowsEstimate uint64
	// Series is the number of distinct tag sets.
	Series uint64
	// Bytes is the table's keys and values in bytes (badger's accounting,
	// before compression).
	Bytes uint64
	// ComputedAt is when the store counted them (at most
	// --store-table-stats-max-age ago).
	ComputedAt time.Time
}

// TableStats counts what table name holds. ErrTableNotFound for an unknown
// table; a storage failure is returned as is. Safe for concurrent use.
func (s *Drainer) TableStats(name string) (TableStats, error) {
	t, err := s.lookup(name)
	if err != nil {
		return TableStats{}, err
	}
	st, err := s.st.TableStats(storeCtx, t.snapshot().tid)
	if err != nil {
		return TableStats{}, storageErr("table stats", err)
	}
	return TableStats{Fragments: st.Fragments, RowsEstimate: st.RowsEstimate(), Series: st.Series, Bytes: st.Bytes, ComputedAt: st.ComputedAt}, nil
}

// ConsumerLag is a named consumer's position and how far it is behind
// (the figures of ingestd_feed_consumer_lag_fragments and _seconds).
type ConsumerLag struct {
	ConsumerInfo
	// Fragments is watermark - position (the whole watermark when the
	// consumer's epoch is stale).
	Fragments uint64
	// Seconds is how long ago the oldest fragment it has not applied was
	// committed; 0 when caught up.
	Seconds float64
}

// ConsumerLags lists table's named consumers with their lag, ordered by
// name, from one snapshot of the table (so a lag is never negative).
// ErrTableNotFound for an unknown table. Safe for concurrent use.
func (s *Drainer) ConsumerLags(table string) ([]ConsumerLag, error) {
	t, err := s.lookup(table)
	if err != nil {
		return nil, err
	}
	return s.consumerLags(t, t.snapshot()), nil
}

func (s *registry) consumerLags(t *table, p published) []ConsumerLag {
	now := s.now()
	list := t.consumers.list()
	out := make([]ConsumerLag, len(list))
	for i, c := range list {
		pos := c.Position
		if c.Epoch != p.epoch || pos > p.watermark {
			pos = 0 // a stale epoch must resync everything
		}
		l := ConsumerLag{
			ConsumerInfo: s.consumerInfo(c, p.epoch, now),
			Fragments:    p.watermark - pos,
		}
		if l.Fragments > 0 {
			if ts, ok, err := s.st.SeqTime(storeCtx, p.tid, pos+1); err == nil && ok {
				l.Seconds = max(0, now.Sub(time.Unix(0, ts)).Seconds())
			}
		}
		out[i] = l
	}
	return out
}
