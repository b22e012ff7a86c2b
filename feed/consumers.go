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
	Owner    string    // the name of the token that owns it ("" without access control)
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

// Principal is who acts on a named consumer (docs/security.md#consumers):
// Name is the token's name, "" without access control (every client is
// then the same principal). A consumer belongs to the principal whose
// drain created it; only it, or a principal with Admin (the admin scope on
// the consumer's table), may move, reuse or delete it. Admin moves and
// deletes without taking the consumer over.
type Principal struct {
	Name  string // the token's name; "" without access control
	Admin bool   // holds the admin scope on the consumer's table
}

// Consumer refusal reasons, the closed label set of
// ingestd_feed_consumer_refusals_total.
const (
	refusedTableBudget = "table_budget"
	refusedTokenBudget = "token_budget"
	refusedTotalBudget = "total_budget"
	refusedNameBytes   = "name_bytes"
	refusedNotOwner    = "not_owner"
)

var consumerRefusals = []string{refusedTableBudget, refusedTokenBudget, refusedTotalBudget, refusedNameBytes, refusedNotOwner}

// consumerCounts counts the named consumers of every live table, in all
// and by owner, for the budgets Config.MaxConsumers and
// Config.MaxConsumersPerToken. Every consumerSet change that adds or
// removes a consumer updates it under the set's lock (consumerSet.mu, then
// consumerCounts.mu).
type consumerCounts struct {
	mu      sync.Mutex // guards total and byOwner
	total   int
	byOwner map[string]int
}

// take counts one more consumer of owner within the budgets, or reports
// the budget it would exceed ("" when none).
func (cc *consumerCounts) take(owner string, perToken, total int) string {
	cc.mu.Lock()
	defer cc.mu.Unlock()
	switch {
	case cc.total >= total:
		return refusedTotalBudget
	case cc.byOwner[owner] >= perToken:
		return refusedTokenBudget
	}
	cc.total++
	cc.byOwner[owner]++
	return ""
}

// add counts n more consumers of owner (fewer when n is negative),
// whatever the budgets: loaded from the store, claimed, or removed.
func (cc *consumerCounts) add(owner string, n int) {
	cc.mu.Lock()
	defer cc.mu.Unlock()
	cc.total += n
	cc.byOwner[owner] += n
	if cc.byOwner[owner] <= 0 {
		delete(cc.byOwner, owner)
	}
}

// count returns the consumers in all.
func (cc *consumerCounts) count() int {
	cc.mu.Lock()
	defer cc.mu.Unlock()
	return cc.total
}

// consumerSet is a table's named consumers.
type consumerSet struct {
	mu      sync.Mutex // guards byName, byOwner and dirty
	byName  map[string]*store.Consumer
	byOwner map[string]int // consumers by owner, for Config.MaxConsumersPerTable
	dirty   map[string]bool
}

func newConsumerSet() *consumerSet {
	return &consumerSet{byName: map[string]*store.Consumer{}, byOwner: map[string]int{}, dirty: map[string]bool{}}
}

// load adds stored consumers to an empty set, counted in cc.
func (cs *consumerSet) load(list []store.Consumer, cc *consumerCounts) {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	for i := range list {
		c := list[i]
		cs.byName[c.Name] = &c
		cs.byOwner[c.Owner]++
		cc.add(c.Owner, 1)
	}
}

// consumerBudgets are the limits record applies to a new consumer.
type consumerBudgets struct {
	perTable, perToken, total int
}

// consumerRefusal is a refused record: the reason (a consumerRefusals
// label) and the error for the client.
type consumerRefusal struct {
	reason string
	err    error
}

// record sets a consumer's position for by, adding it when new within the
// budgets (b), counted in cc. It reports whether it added the consumer,
// or the refusal: ErrConsumerOwned for a consumer of another principal
// (by without Admin), ErrTooManyConsumers past a budget. An unowned
// consumer (created without access control) is claimed by the first
// principal with a name that moves it.
func (cs *consumerSet) record(name string, by Principal, epoch, position uint64, now time.Time, b consumerBudgets, cc *consumerCounts) (bool, *consumerRefusal) {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	c, ok := cs.byName[name]
	switch {
	case ok && c.Owner == "" && by.Name != "":
		if cs.byOwner[""]--; cs.byOwner[""] <= 0 {
			delete(cs.byOwner, "")
		}
		cs.byOwner[by.Name]++
		cc.add("", -1)
		cc.add(by.Name, 1)
		c.Owner = by.Name
	case ok && c.Owner != by.Name && !by.Admin:
		return false, &consumerRefusal{refusedNotOwner, fmt.Errorf("%w: consumer %s belongs to token %s; use another name, or have it (or an admin token) delete it",
			ErrConsumerOwned, QuoteInput(name), QuoteInput(c.Owner))}
	case !ok:
		if cs.byOwner[by.Name] >= b.perTable {
			return false, &consumerRefusal{refusedTableBudget, fmt.Errorf("%w: %s holds %d named consumers of this table already (--max-consumers-per-table); DELETE one first",
				ErrTooManyConsumers, ownerText(by.Name), b.perTable)}
		}
		switch cc.take(by.Name, b.perToken, b.total) {
		case refusedTotalBudget:
			return false, &consumerRefusal{refusedTotalBudget, fmt.Errorf("%w: the server holds %d named consumers already (--max-consumers); DELETE one first",
				ErrTooManyConsumers, b.total)}
		case refusedTokenBudget:
			return false, &consumerRefusal{refusedTokenBudget, fmt.Errorf("%w: %s holds %d named consumers already (--max-consumers-per-token); DELETE one first",
				ErrTooManyConsumers, ownerText(by.Name), b.perToken)}
		}
		c = &store.Consumer{Name: name, Owner: by.Name}
		cs.byName[name] = c
		cs.byOwner[by.Name]++
	}
	c.Epoch, c.Position, c.LastSeen = epoch, position, now.UnixNano()
	cs.dirty[name] = true
	return !ok, nil
}

// ownerText names an owner in a message.
func ownerText(owner string) string {
	if owner == "" {
		return "the server (no access control: all clients share one budget)"
	}
	return "token " + QuoteInput(owner)
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

// redirty marks the consumers of taken, a takeDirty whose write failed,
// changed again, so that the next flush writes their positions (the
// latest: a consumer that moved meanwhile is written as it is now; one
// forgotten meanwhile is not).
func (cs *consumerSet) redirty(taken []store.Consumer) {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	for _, c := range taken {
		if _, ok := cs.byName[c.Name]; ok {
			cs.dirty[c.Name] = true
		}
	}
}

// forgetLocked removes consumer c from the set and from cc. cs.mu must be
// held.
func (cs *consumerSet) forgetLocked(c *store.Consumer, cc *consumerCounts) {
	delete(cs.byName, c.Name)
	delete(cs.dirty, c.Name)
	if cs.byOwner[c.Owner]--; cs.byOwner[c.Owner] <= 0 {
		delete(cs.byOwner, c.Owner)
	}
	cc.add(c.Owner, -1)
}

// remove forgets one consumer, durably, when by may (its owner, an
// admin, or anyone for an unowned one): ErrConsumerNotFound,
// ErrConsumerOwned.
func (cs *consumerSet) remove(st store.ConsumerStore, table, name string, by Principal, cc *consumerCounts) error {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	c, ok := cs.byName[name]
	if !ok {
		return fmt.Errorf("%w: %s", ErrConsumerNotFound, QuoteInput(name))
	}
	if c.Owner != "" && c.Owner != by.Name && !by.Admin {
		return fmt.Errorf("%w: consumer %s belongs to token %s, which (or an admin token) may delete it",
			ErrConsumerOwned, QuoteInput(name), QuoteInput(c.Owner))
	}
	cs.forgetLocked(c, cc)
	return st.DeleteConsumer(storeCtx, table, name)
}

// expire forgets, durably, the consumers last seen before cutoff and
// returns how many it removed.
func (cs *consumerSet) expire(st store.ConsumerStore, table string, cutoff time.Time, cc *consumerCounts) (int, error) {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	n := 0
	for _, c := range cs.byName {
		if time.Unix(0, c.LastSeen).After(cutoff) {
			continue
		}
		if err := st.DeleteConsumer(storeCtx, table, c.Name); err != nil {
			return n, err
		}
		cs.forgetLocked(c, cc)
		n++
	}
	return n, nil
}

// dropAll forgets every consumer in memory (DROP: the store dropped them
// with the table).
func (cs *consumerSet) dropAll(cc *consumerCounts) {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	for _, c := range cs.byName {
		cs.forgetLocked(c, cc)
	}
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
	info := ConsumerInfo{Name: c.Name, Owner: c.Owner, Epoch: c.Epoch, Position: c.Position, LastSeen: time.Unix(0, c.LastSeen).UTC()}
	if s.holds(c, epoch, now) {
		info.HoldsHistory = true
		info.HoldUntil = info.LastSeen.Add(s.cfg.ConsumerHoldMaxAge)
	}
	return info
}

// DeleteConsumer forgets a named consumer, active or not (docs/contract.md#consumers), on
// behalf of by: its owner, an admin, or anyone for an unowned consumer.
// ErrTableNotFound or ErrConsumerNotFound when there is nothing to forget,
// ErrConsumerOwned when the consumer belongs to another principal.
func (s *Drainer) DeleteConsumer(table, name string, by Principal) error {
	t, err := s.lookup(table)
	if err != nil {
		return err
	}
	s.consumerMu.Lock()
	defer s.consumerMu.Unlock()
	err = t.consumers.remove(s.st, table, name, by, s.counts)
	switch {
	case errors.Is(err, ErrConsumerNotFound):
		if nerr := s.checkConsumerName(name); nerr != nil {
			return nerr // no consumer can have this name: a client mistake
		}
	case errors.Is(err, ErrConsumerOwned):
		s.m.consumerRefusals.WithLabelValues(refusedNotOwner).Inc()
	}
	return err
}

// checkConsumerName checks a consumer name: CheckName within
// Config.MaxConsumerNameBytes (and --max-name-bytes).
func (s *registry) checkConsumerName(name string) error {
	limit, flag := s.cfg.MaxConsumerNameBytes, "--max-consumer-name-bytes"
	if s.cfg.MaxNameBytes < limit {
		limit, flag = s.cfg.MaxNameBytes, ""
	}
	err := CheckName("consumer", name, limit)
	if ne, ok := errors.AsType[*NameError](err); ok && ne.Rule == RuleLength {
		ne.Flag = flag
	}
	return err
}

// consumerUpkeep writes the consumer positions changed since the last
// flush every Config.ConsumerFlushInterval and expires idle consumers
// every Config.SweepInterval until stop is closed. It runs beside the
// sequencer goroutine, so a slow store write of positions (a shared
// store's round trip, a cluster that does not answer) never holds a
// write up; consumerMu orders it with DROP and DeleteConsumer.
func (s *Sequencer) consumerUpkeep(stop <-chan struct{}) {
	flush := time.NewTicker(s.cfg.ConsumerFlushInterval)
	defer flush.Stop()
	expire := time.NewTicker(s.cfg.SweepInterval)
	defer expire.Stop()
	for {
		select {
		case <-stop:
			return
		case <-flush.C:
			if err := s.flushConsumers(); err != nil {
				s.logger.Error("write consumer positions; retried at the next flush", "err", err)
			}
		case <-expire.C:
			s.expireConsumers()
		}
	}
}

// expireConsumers forgets, durably, every named consumer not seen for
// Config.ConsumerIdleExpiry (0: never), counting them in
// ingestd_feed_consumers_expired_total. A failure is logged; the next
// pass retries.
func (s *Sequencer) expireConsumers() {
	if s.cfg.ConsumerIdleExpiry <= 0 {
		return
	}
	cutoff := s.now().Add(-s.cfg.ConsumerIdleExpiry)
	s.consumerMu.Lock()
	defer s.consumerMu.Unlock()
	for _, t := range s.liveTables() {
		n, err := t.consumers.expire(s.st, t.name, cutoff, s.counts)
		s.m.consumersExpired.Add(float64(n))
		if err != nil {
			if !errors.Is(err, store.ErrClosed) {
				s.logger.Error("remove idle consumers", "table", t.name, "err", err)
			}
			return
		}
	}
}

// flushConsumers durably writes the consumer positions changed since the
// last flush and returns the store's error (store.ErrClosed: nil). A
// failed write leaves them changed, so the upkeep's next flush writes
// them (a write meeting another table's removal, which blocks the
// store's writes a moment, failed and was not retried until the
// consumer moved again); the final flush at shutdown makes it Run's
// error.
func (s *Sequencer) flushConsumers() error {
	s.consumerMu.Lock()
	defer s.consumerMu.Unlock()
	byTable := map[string][]store.Consumer{}
	sets := map[string]*consumerSet{}
	for _, t := range s.liveTables() {
		if t.dropping.Load() {
			continue
		}
		if d := t.consumers.takeDirty(); len(d) > 0 {
			byTable[t.name], sets[t.name] = d, t.consumers
		}
	}
	if len(byTable) == 0 {
		return nil
	}
	if err := s.st.PutConsumers(storeCtx, byTable); err != nil && !errors.Is(err, store.ErrClosed) {
		for name, d := range byTable {
			sets[name].redirty(d)
		}
		return fmt.Errorf("feed: write consumer positions: %w", err)
	}
	return nil
}
