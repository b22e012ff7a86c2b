package storetest

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ingestd/ingestd/store"
	"github.com/ingestd/ingestd/store/testdeadline"
)

// The single-store guarantees again, on a shared store seen as two
// processes see it: one writes (every write and table change goes to
// it), the other, its peer, answers every read once it has applied what
// the writer acknowledged (Harness.Applied), as a drain served by another
// node reads. The sweeps run on both, as every node's feed sweeps.
//
// Left out: StampedBeforeVisible. It reads inside Append, between the
// numbers and the commit; the peer's reads follow its own watermark
// (what it applied), never the writer's stamped.
var notThroughPeer = map[string]bool{"StampedBeforeVisible": true}

// throughPeer is h with backends that write to one store and read from
// its peer.
func throughPeer(h Harness) Harness {
	var p Harness
	p.New = func(t testing.TB) store.Backend {
		a := h.New(t)
		return &peerView{a: a, b: h.Peer(t, a), applied: h.Applied}
	}
	p.Reads = func(b store.Backend) (uint64, uint64) { return h.Reads(b.(*peerView).b) }
	if h.Restart != nil && h.Crash != nil {
		// The writer restarts or crashes; the peer runs on.
		p.Restart = func(t testing.TB, b store.Backend) store.Backend {
			v := b.(*peerView)
			return &peerView{a: h.Restart(t, v.a), b: v.b, applied: h.Applied}
		}
		p.Crash = func(t testing.TB, b store.Backend) store.Backend {
			v := b.(*peerView)
			return &peerView{a: h.Crash(t, v.a), b: v.b, applied: h.Applied}
		}
	}
	return p
}

func runThroughPeer(t *testing.T, h Harness) {
	p := throughPeer(h)
	for _, tc := range singleTests {
		if notThroughPeer[tc.name] || tc.durable && p.Restart == nil {
			continue
		}
		t.Run(tc.name+"ThroughPeer", func(t *testing.T) { tc.fn(t, p) })
	}
}

// peerView is a store.Backend that writes to a and reads from b, a's
// peer, once b has applied what a had acknowledged when the read began.
type peerView struct {
	a, b    store.Backend
	applied func(a, b store.Backend) func() bool
	// closed is set by Close: b then applies nothing more, so a read
	// does not wait for it (the read itself reports store.ErrClosed).
	closed atomic.Bool
}

// settle waits until v.b has applied everything v.a acknowledged so far.
// A ctx that ended, or a view closed, returns at once: the read itself
// reports it.
func (v *peerView) settle(ctx context.Context) error {
	done := v.applied(v.a, v.b)
	timeout := testdeadline.Scale(time.Minute)
	deadline := time.Now().Add(timeout)
	for !done() {
		if ctx.Err() != nil || v.closed.Load() {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("storetest: the peer did not apply what the writer acknowledged within %s", timeout)
		}
		time.Sleep(2 * time.Millisecond)
	}
	return nil
}

func (v *peerView) Limits() store.Limits { return v.a.Limits() }

func (v *peerView) Close() error {
	v.closed.Store(true)
	return errors.Join(v.a.Close(), v.b.Close())
}

func (v *peerView) LoadTables(ctx context.Context) ([]store.TableMeta, error) {
	if err := v.settle(ctx); err != nil {
		return nil, err
	}
	return v.b.LoadTables(ctx)
}

func (v *peerView) LoadSeries(ctx context.Context, tid uint64) ([]store.Series, error) {
	if err := v.settle(ctx); err != nil {
		return nil, err
	}
	return v.b.LoadSeries(ctx, tid)
}

func (v *peerView) Append(ctx context.Context, commits []store.TableCommit, stamped func()) error {
	return v.a.Append(ctx, commits, stamped)
}

func (v *peerView) NewTableID(ctx context.Context) (uint64, error) { return v.a.NewTableID(ctx) }

func (v *peerView) PutTable(ctx context.Context, m store.TableMeta) (store.TableMeta, error) {
	return v.a.PutTable(ctx, m)
}

func (v *peerView) TruncateTable(ctx context.Context, tid uint64) (store.TableMeta, error) {
	return v.a.TruncateTable(ctx, tid)
}

func (v *peerView) DropTable(ctx context.Context, tid uint64) (store.TableMeta, error) {
	return v.a.DropTable(ctx, tid)
}

func (v *peerView) PruneTombstone(ctx context.Context, name string, floor store.TableMeta) error {
	return v.a.PruneTombstone(ctx, name, floor)
}

func (v *peerView) ReadSeq(ctx context.Context, tid, after, upto uint64, limit int, filter *store.SeqFilter, visit func(*store.Row) error) (uint64, error) {
	if err := v.settle(ctx); err != nil {
		return 0, err
	}
	return v.b.ReadSeq(ctx, tid, after, upto, limit, filter, visit)
}

func (v *peerView) SeqTime(ctx context.Context, tid, seq uint64) (int64, bool, error) {
	if err := v.settle(ctx); err != nil {
		return 0, false, err
	}
	return v.b.SeqTime(ctx, tid, seq)
}

func (v *peerView) ReadRows(ctx context.Context, tid uint64, cur store.RowCursor, start, end int64, limit int, visit func(*store.Row) error) (store.RowCursor, bool, error) {
	if err := v.settle(ctx); err != nil {
		return nil, false, err
	}
	return v.b.ReadRows(ctx, tid, cur, start, end, limit, visit)
}

func (v *peerView) PutConsumers(ctx context.Context, byTable map[string][]store.Consumer) error {
	return v.a.PutConsumers(ctx, byTable)
}

func (v *peerView) LoadConsumers(ctx context.Context, table string) ([]store.Consumer, error) {
	if err := v.settle(ctx); err != nil {
		return nil, err
	}
	return v.b.LoadConsumers(ctx, table)
}

func (v *peerView) DeleteConsumer(ctx context.Context, table, name string) error {
	return v.a.DeleteConsumer(ctx, table, name)
}

// SweepBefore sweeps the writer's store, then the peer's once it has
// applied what the writer swept: the writer's result is returned.
func (v *peerView) SweepBefore(ctx context.Context, tid uint64, cutoff int64, maxFragments int) (store.SweepResult, error) {
	res, err := v.a.SweepBefore(ctx, tid, cutoff, maxFragments)
	if err != nil {
		return res, err
	}
	if err := v.settle(ctx); err != nil {
		return res, err
	}
	_, err = v.b.SweepBefore(ctx, tid, cutoff, maxFragments)
	return res, err
}

// RaiseHorizon raises the horizon on both, as SweepBefore sweeps.
func (v *peerView) RaiseHorizon(ctx context.Context, tid, h uint64) (uint64, error) {
	got, err := v.a.RaiseHorizon(ctx, tid, h)
	if err != nil {
		return got, err
	}
	if err := v.settle(ctx); err != nil {
		return got, err
	}
	_, err = v.b.RaiseHorizon(ctx, tid, h)
	return got, err
}

func (v *peerView) Horizon(ctx context.Context, tid uint64) (uint64, error) {
	if err := v.settle(ctx); err != nil {
		return 0, err
	}
	return v.b.Horizon(ctx, tid)
}

func (v *peerView) FirstSeqSince(ctx context.Context, tid, from uint64, cutoff int64, maxBlocks int) (uint64, bool, bool, error) {
	if err := v.settle(ctx); err != nil {
		return 0, false, false, err
	}
	return v.b.FirstSeqSince(ctx, tid, from, cutoff, maxBlocks)
}

func (v *peerView) TableStats(ctx context.Context, tid uint64) (store.TableStats, error) {
	if err := v.settle(ctx); err != nil {
		return store.TableStats{}, err
	}
	return v.b.TableStats(ctx, tid)
}
