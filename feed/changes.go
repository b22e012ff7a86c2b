package feed

import (
	"errors"
	"fmt"
	"maps"
	"time"

	"github.com/ingestd/ingestd/store"
)

// tableChange is a table's DDL (CREATE TABLE, SET SYNC, a retention,
// TRUNCATE, DROP) on a shared store, whose store calls the resolver makes
// off the sequencer's goroutine (docs/design.md#shared-metadata): each is
// a compare-and-set of the table's record in the other processes' bucket,
// a round trip the sequencer must not wait for. The sequencer decides
// what to store (prepareChange), the resolver stores it (runChange), and
// the sequencer takes the result (finishChange). One change is in flight
// at a time; meanwhile every later table change, and every write with a
// point of the changing table, waits behind it in arrival order (so a
// write sent after the DROP's answer is never applied before it), and the
// other processes' reports of that name wait too; the writes of every
// other table commit as usual.
type tableChange struct {
	o *op
	// t is the live table the change acts on, nil when it creates one.
	t *table
	// create is the new table's metadata but for its id (CREATE TABLE of
	// a name not live here); cols the columns an opDefine declares.
	create store.TableMeta
	cols   []store.Column
	// puts are the records a CREATE or SET SYNC of a live table stores,
	// in order (a retention, then the sync), what each changes in putWhat.
	puts    []store.TableMeta
	putWhat []string
	// tombs and floor are the tombstones and their floor when a DROP was
	// prepared: the resolver folds the oldest into the floor, as
	// pruneTombstones does, past maxTombs (one change is in flight at a
	// time: no other folds them meanwhile).
	tombs    map[string]store.TableMeta
	floor    store.TableMeta
	maxTombs int

	// Set by the resolver.
	meta     store.TableMeta // the instance created or truncated to, or the DROP's tombstone
	created  bool            // meta is the instance this change created (not another process's)
	instance *instanceState  // another process's instance a CREATE found
	stored   int             // how many of puts were stored
	pruned   []string        // the tombstones folded into newFloor
	newFloor store.TableMeta
	err      error // the change's store error, as the store returned it
	pruneErr error // a failed fold, after a DROP that was stored

	// waiting are the operations that arrived while the change was in
	// flight and wait behind it: every later table change, and the writes
	// with a point of the table.
	waiting []*op
}

// beginChange hands table change o to the resolver, or has it wait
// behind the change in flight; a change the store has no part in (a
// missing table, nothing to change) is answered at once. Shared store
// only; sequencer goroutine only.
func (s *Sequencer) beginChange(o *op) {
	if s.chg != nil {
		s.waitChange(o)
		return
	}
	c := s.prepareChange(o)
	if c == nil {
		failOps([]*op{o}, o.err)
		return
	}
	s.chg = c
	o.parked = true
	s.res.parked.Add(1)
	s.toResolver(&resolveReq{o: o, change: c})
}

// waitChange has o wait behind the change in flight.
func (s *Sequencer) waitChange(o *op) {
	o.parked = true
	s.res.parked.Add(1)
	s.chg.waiting = append(s.chg.waiting, o)
}

// changing reports whether a point of write o is of the table whose
// change is in flight.
func (s *Sequencer) changing(o *op) bool {
	if s.chg == nil {
		return false
	}
	name := s.chg.o.name
	for i := range o.batch.Points {
		if o.batch.Points[i].Table == name {
			return true
		}
	}
	return false
}

// prepareChange decides what change o stores, from the tables as the
// sequencer has them; nil when o is answered without the store (o.err,
// o.status set). The checks and the records are runControl's.
func (s *Sequencer) prepareChange(o *op) *tableChange {
	t, ok := s.tables[o.name]
	switch {
	case o.kind == opDefine && ok:
		o.err = fmt.Errorf("%w: %s", ErrTableExists, QuoteInput(o.name))
		return nil
	case o.kind == opDefine || o.kind == opCreate && !ok:
		if o.err = s.checkTableLimit(); o.err != nil {
			return nil
		}
		c := &tableChange{o: o, create: s.newMeta(o.name, o.flag)}
		if o.retention != nil {
			ns := int64(*o.retention)
			c.create.Retention = &ns
		}
		if o.kind == opDefine {
			c.cols = storeColumns(o.cols)
		}
		return c
	case !ok:
		_, o.err = s.lookup(o.name)
		return nil
	}
	c := &tableChange{o: o, t: t}
	switch o.kind {
	case opCreate, opSetSync:
		m := t.meta
		if o.retention != nil {
			ns := int64(*o.retention)
			m.Retention = &ns
			c.puts, c.putWhat = append(c.puts, m), append(c.putWhat, "set retention")
		}
		if !o.keepSync && t.meta.Sync != o.flag {
			m.Sync = o.flag
			if o.flag {
				m.Epoch++
			}
			c.puts, c.putWhat = append(c.puts, m), append(c.putWhat, "set sync")
		}
		if len(c.puts) == 0 {
			o.status = t.status()
			return nil
		}
	case opDrop:
		c.tombs, c.floor, c.maxTombs = maps.Clone(s.tombstones), s.floor, s.cfg.MaxTombstones
	}
	return c
}

// runChange makes c's store calls. Resolver goroutine only: it reads
// nothing of the sequencer's state but c.
func (s *Sequencer) runChange(c *tableChange) {
	o := c.o
	if c.t == nil {
		c.err = s.runCreate(c)
		return
	}
	switch o.kind {
	case opCreate, opSetSync:
		for _, m := range c.puts {
			if _, c.err = s.st.PutTable(storeCtx, m); c.err != nil {
				return
			}
			c.stored++
		}
	case opTruncate:
		c.meta, c.err = s.st.TruncateTable(storeCtx, c.t.meta.ID)
	case opDrop:
		// Under consumerMu, as the DROP of a store of one process: a
		// consumer flush in flight ends first, and none after it writes
		// the table's consumers back (the table stays live here until
		// the sequencer takes the result).
		s.consumerMu.Lock()
		c.meta, c.err = s.st.DropTable(storeCtx, c.t.meta.ID)
		if c.err == nil {
			c.t.dropping.Store(true)
		}
		s.consumerMu.Unlock()
		if c.err == nil { // with the tombstones as the DROP saw them, and its own
			c.tombs[c.o.name] = c.meta
			c.pruned, c.newFloor, c.pruneErr = foldTombstones(s.st, c.tombs, c.floor, c.maxTombs)
		}
	}
}

// runCreate creates c's table: a new instance id, its record (which
// another process may have created first: its instance is then loaded
// and taken), and an opDefine's columns.
func (s *Sequencer) runCreate(c *tableChange) error {
	ct, created, err := s.createInstance(c.create)
	if err != nil {
		return err
	}
	c.meta, c.instance, c.created = ct.meta, ct.instance, created
	if len(c.cols) > 0 {
		if c.meta.Columns, err = s.shared.AddColumns(storeCtx, c.meta.ID, c.cols); err != nil {
			return err
		}
	}
	return nil
}

// finishChange takes the result of the change in flight: the table takes
// what was stored, the change's operation is answered, and the
// operations that waited behind it are returned to be processed, in
// order. A storage failure of the store's own (not ErrUnavailable) is
// returned: it stops the sequencer. Sequencer goroutine only.
func (s *Sequencer) finishChange(c *tableChange) ([]*op, error) {
	s.chg = nil
	o := c.o
	o.parked = false
	s.res.parked.Add(-1)
	if c.t == nil {
		o.err = s.takeCreated(c)
	} else {
		o.err = s.takeChange(c)
	}
	var fatal error
	if o.err != nil && errors.Is(o.err, errStorage) {
		fatal = o.err
	}
	failOps([]*op{o}, o.err)
	for _, w := range c.waiting {
		w.parked = false
		s.res.parked.Add(-1)
	}
	if fatal != nil {
		failOps(c.waiting, fatal)
		return nil, fatal
	}
	// The name's reports that waited are taken at the next turn.
	select {
	case s.follow.wake <- struct{}{}:
	default:
	}
	return c.waiting, nil
}

// takeCreated makes the instance c created (or found) the table's.
func (s *Sequencer) takeCreated(c *tableChange) error {
	o := c.o
	if c.err != nil {
		what := "create table"
		if o.kind == opDefine {
			what = "define table"
		}
		return storageErr(what, c.err)
	}
	t := s.tables[o.name]
	if t == nil || t.meta.ID < c.meta.ID {
		t = s.installCreated(t, &tableNeeds{name: o.name, meta: c.meta, instance: c.instance})
	}
	if len(c.cols) > 0 {
		s.adoptColumns(t, c.meta.Columns)
	}
	o.created = c.created
	o.status = t.status()
	return nil
}

// takeChange applies what a change of live table c.t stored.
func (s *Sequencer) takeChange(c *tableChange) error {
	o, t := c.o, c.t
	switch o.kind {
	case opCreate, opSetSync:
		for i, m := range c.puts[:c.stored] {
			if c.putWhat[i] == "set retention" {
				t.setRetention(time.Duration(*m.Retention))
				continue
			}
			t.setSync(m.Sync, m.Epoch)
		}
		if c.err != nil {
			return s.changeErr(c.putWhat[c.stored], c.err)
		}
	case opTruncate:
		if c.err != nil {
			return s.changeErr("truncate", c.err)
		}
		t = s.truncated(t, c.meta)
	case opDrop:
		if c.err != nil {
			return s.changeErr("drop", c.err)
		}
		s.consumerMu.Lock()
		s.dropTable(t, &c.meta)
		s.consumerMu.Unlock()
		s.takeFold(c.pruned, c.newFloor)
		if c.pruneErr != nil {
			return storageErr("prune a tombstone", c.pruneErr)
		}
		return nil
	}
	o.status = t.status()
	return nil
}

// failChange answers the change in flight, if any, and every operation
// waiting behind it with err. Sequencer goroutine only, once Run stops
// (the resolver's request of the change is failed with the others).
func (s *Sequencer) failChange(err error) {
	if s.chg == nil {
		return
	}
	for _, w := range s.chg.waiting {
		w.parked = false
		s.res.parked.Add(-1)
	}
	failOps(s.chg.waiting, err)
	s.chg = nil
}
