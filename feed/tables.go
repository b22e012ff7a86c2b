package feed

import (
	"context"
	"sort"

	"github.com/ingestd/ingestd/store"
)

// CreateTable creates table name with the given sync setting (SPEC §5
// CREATE TABLE … WITH (SYNC)). It is idempotent: for an existing table it
// reports created=false and applies sync like SetSync. A table dropped
// before resumes above its old epoch and sequence.
func (s *Sequencer) CreateTable(ctx context.Context, name string, sync bool) (created bool, st SyncStatus, err error) {
	o, err := s.control(ctx, opCreate, name, sync)
	if err != nil {
		return false, SyncStatus{}, err
	}
	return o.created, o.status, nil
}

// SetSync enables or disables the feed of a table (ALTER TABLE … SET SYNC
// / SET SYNC OFF). Enabling a table whose sync is OFF bumps its epoch;
// disabling keeps it; setting the current value is a no-op. It returns
// ErrTableNotFound for an unknown table.
func (s *Sequencer) SetSync(ctx context.Context, name string, enabled bool) (SyncStatus, error) {
	o, err := s.control(ctx, opSetSync, name, enabled)
	if err != nil {
		return SyncStatus{}, err
	}
	return o.status, nil
}

// Truncate deletes every row of a table and its columns, bumps its epoch
// and keeps its sequence (TRUNCATE). ErrTableNotFound for an unknown table.
func (s *Sequencer) Truncate(ctx context.Context, name string) (SyncStatus, error) {
	o, err := s.control(ctx, opTruncate, name, false)
	if err != nil {
		return SyncStatus{}, err
	}
	return o.status, nil
}

// Drop deletes a table (DROP TABLE), keeping a tombstone of its epoch and
// sequence so that a re-created table resumes above them.
// ErrTableNotFound for an unknown table.
func (s *Sequencer) Drop(ctx context.Context, name string) error {
	_, err := s.control(ctx, opDrop, name, false)
	return err
}

// Status returns a table's sync status (SHOW SYNC FROM t).
func (s *Sequencer) Status(name string) (SyncStatus, error) {
	t, err := s.lookup(name)
	if err != nil {
		return SyncStatus{}, err
	}
	return t.status(), nil
}

// Table describes one table (SHOW COLUMNS FROM t); never lists x_ columns.
func (s *Sequencer) Table(name string) (TableInfo, error) {
	t, err := s.lookup(name)
	if err != nil {
		return TableInfo{}, err
	}
	p := t.snapshot()
	return p.info(name), nil
}

// Tables lists every table, ordered by name.
func (s *Sequencer) Tables() []TableInfo {
	ts := s.liveTables()
	sort.Slice(ts, func(i, j int) bool { return ts[i].name < ts[j].name })
	out := make([]TableInfo, len(ts))
	for i, t := range ts {
		p := t.snapshot()
		out[i] = p.info(t.name)
	}
	return out
}

// runControl executes a table operation in the sequencer goroutine.
func (s *Sequencer) runControl(o *op) {
	t, ok := s.tables[o.name]
	if o.kind == opCreate && !ok {
		if o.err = s.checkTableLimit(); o.err != nil {
			return
		}
		t = s.createTable(o.name, o.flag)
		o.created = true
		if err := s.st.PutMeta(t.meta); err != nil {
			o.err = storageErr("create table", err)
			return
		}
		o.status = t.status()
		return
	}
	if !ok {
		_, o.err = s.lookup(o.name)
		return
	}
	switch o.kind {
	case opCreate, opSetSync:
		if t.meta.Sync != o.flag {
			t.meta.Sync = o.flag
			if o.flag {
				t.meta.Epoch++
			}
			if err := s.st.PutMeta(t.meta); err != nil {
				o.err = storageErr("set sync", err)
				return
			}
			t.mu.Lock()
			t.pub.sync, t.pub.epoch = t.meta.Sync, t.meta.Epoch
			t.notifyLocked()
			t.mu.Unlock()
		}
	case opTruncate:
		old := t.meta.ID
		nt := newTable(store.TableMeta{
			Name: t.name, ID: s.st.AllocTableID(), Sync: t.meta.Sync,
			Epoch: t.meta.Epoch + 1, SeqLease: t.meta.SeqLease,
		}, nil)
		nt.seq = t.seq
		nt.pub.seq, nt.pub.watermark = t.seq, t.seq
		nt.consumers = t.consumers
		if err := s.st.PutMeta(nt.meta); err != nil {
			o.err = storageErr("truncate", err)
			return
		}
		s.mu.Lock()
		s.tables[t.name] = nt
		s.mu.Unlock()
		t.notify()
		t = nt
		if err := s.st.DropTableData(old); err != nil {
			o.err = storageErr("truncate", err)
			return
		}
	case opDrop:
		tomb := store.TableMeta{Name: t.name, Epoch: t.meta.Epoch, SeqLease: max(t.meta.SeqLease, t.seq), Dropped: true}
		if err := s.st.PutMeta(tomb); err != nil {
			o.err = storageErr("drop", err)
			return
		}
		s.mu.Lock()
		delete(s.tables, t.name)
		s.tombstones[t.name] = tomb
		s.mu.Unlock()
		t.notify()
		if err := s.pruneTombstones(); err != nil {
			o.err = err
			return
		}
		if err := t.consumers.dropAll(s.st, t.name); err != nil {
			o.err = storageErr("drop consumers", err)
			return
		}
		if err := s.st.DropTableData(t.meta.ID); err != nil {
			o.err = storageErr("drop", err)
		}
		return
	}
	o.status = t.status()
}
