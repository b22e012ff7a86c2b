package feed

import (
	"errors"
	"fmt"
	"sort"
	"sync"
	"time"

	"github.com/ingestd/ingestd/store"
)

// ConsumerInfo is a named consumer's acknowledged position (docs/contract.md#consumers): it
// has applied everything up to Position in Epoch, as of LastSeen.
type ConsumerInfo struct {
	Name     string    // the consumer's name (CheckName's rules), unique per table
	Epoch    uint64    // the epoch its position is in
	Position uint64    // the x_seq up to which it has applied the feed (its last drain's after)
	LastSeen time.Time // when it last drained (UTC)
	// HoldsHistory is true while the consumer holds the table's history
	// horizon at Position+1 (Config.ConsumerHoldsHistory, current epoch),
	// which it does until HoldUntil (LastSeen + Config.ConsumerHoldMaxAge;
	// zero when it holds nothing).
	HoldsHistory bool
	HoldUntil    time.Time
}

// consumerSet is a table's named consumers.
type consumerSet struct {
	mu     sync.Mutex // guards byName and dirty
	byName map[string]*store.Consumer
	dirty  map[string]bool
}

func newConsumerSet() *consumerSet {
	return &consumerSet{byName: map[string]*store.Consumer{}, dirty: map[string]bool{}}
}

func (cs *consumerSet) load(list []store.Consumer) {
	for i := range list {
		c := list[i]
		cs.byName[c.Name] = &c
	}
}

// record sets a consumer's position, adding it when new, within max. It
// reports whether it added the consumer.
func (cs *consumerSet) record(name string, epoch, position uint64, now time.Time, max int) (bool, error) {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	c, ok := cs.byName[name]
	if !ok {
		if len(cs.byName) >= max {
			return false, fmt.Errorf("%w: %d named consumers already (--max-consumers-per-table); DELETE one first", ErrTooManyConsumers, max)
		}
		c = &store.Consumer{Name: name}
		cs.byName[name] = c
	}
	c.Epoch, c.Position, c.LastSeen = epoch, position, now.UnixNano()
	cs.dirty[name] = true
	return !ok, nil
}

func (cs *consumerSet) list() []store.Consumer {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	out := make([]store.Consumer, 0, len(cs.byName))
	for _, c := range cs.byName {
		out = append(out, *c)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// takeDirty returns the consumers changed since the last call.
func (cs *consumerSet) takeDirty() []store.Consumer {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	out := make([]store.Consumer, 0, len(cs.dirty))
	for name := range cs.dirty {
		if c, ok := cs.byName[name]; ok {
			out = append(out, *c)
		}
	}
	clear(cs.dirty)
	return out
}

// remove forgets one consumer, durably.
func (cs *consumerSet) remove(st store.ConsumerStore, table, name string) error {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	if _, ok := cs.byName[name]; !ok {
		return fmt.Errorf("%w: %s", ErrConsumerNotFound, QuoteInput(name))
	}
	delete(cs.byName, name)
	delete(cs.dirty, name)
	return st.DeleteConsumer(storeCtx, table, name)
}

// dropAll forgets every consumer in memory (DROP: the store dropped them
// with the table).
func (cs *consumerSet) dropAll() {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	clear(cs.byName)
	clear(cs.dirty)
}

// Consumers lists a table's named consumers, ordered by name.
// ErrTableNotFound for an unknown table.
func (s *Drainer) Consumers(table string) ([]ConsumerInfo, error) {
	t, err := s.lookup(table)
	if err != nil {
		return nil, err
	}
	list := t.consumers.list()
	epoch, now := t.status().Epoch, s.now()
	out := make([]ConsumerInfo, len(list))
	for i, c := range list {
		out[i] = s.consumerInfo(c, epoch, now)
	}
	return out, nil
}

// consumerInfo describes c of a table at epoch, as of now.
func (s *registry) consumerInfo(c store.Consumer, epoch uint64, now time.Time) ConsumerInfo {
	info := ConsumerInfo{Name: c.Name, Epoch: c.Epoch, Position: c.Position, LastSeen: time.Unix(0, c.LastSeen).UTC()}
	if s.holds(c, epoch, now) {
		info.HoldsHistory = true
		info.HoldUntil = info.LastSeen.Add(s.cfg.ConsumerHoldMaxAge)
	}
	return info
}

// DeleteConsumer forgets a named consumer, active or not (docs/contract.md#consumers).
// ErrTableNotFound or ErrConsumerNotFound when there is nothing to forget.
func (s *Drainer) DeleteConsumer(table, name string) error {
	t, err := s.lookup(table)
	if err != nil {
		return err
	}
	s.consumerMu.Lock()
	defer s.consumerMu.Unlock()
	err = t.consumers.remove(s.st, table, name)
	if errors.Is(err, ErrConsumerNotFound) {
		if nerr := CheckName("consumer", name, s.cfg.MaxNameBytes); nerr != nil {
			return nerr // no consumer can have this name: a client mistake
		}
	}
	return err
}

// flushConsumers durably writes the consumer positions changed since the
// last flush. A failure is logged and the positions are written at the next
// change; they only feed lag metrics and listings.
func (s *Sequencer) flushConsumers() {
	s.consumerMu.Lock()
	defer s.consumerMu.Unlock()
	byTable := map[string][]store.Consumer{}
	for _, t := range s.liveTables() {
		if d := t.consumers.takeDirty(); len(d) > 0 {
			byTable[t.name] = d
		}
	}
	if len(byTable) == 0 {
		return
	}
	if err := s.st.PutConsumers(storeCtx, byTable); err != nil && !errors.Is(err, store.ErrClosed) {
		s.logger.Error("write consumer positions", "err", err)
	}
}
