package badger

import (
	"bytes"
	"fmt"
	"testing"
)

// TestGCLeavesFileNotYetInLSM checks a change ingestd makes to badger
// (FORK.md): value-log garbage collection never rewrites a file whose
// values may not be in the LSM tree yet. writeRequests writes a batch's
// values to the value log, rotating to a new file when the current one
// is full, and only then inserts the batch's keys into the memtable,
// waiting for a flush when the memtables are full. Upstream, a collection
// that picks the file just left in that window finds none of the batch's
// keys, drops their values as garbage and deletes the file: the keys then
// point into a deleted file ("file with ID: N not found") and read as
// empty values. The test runs the collection inside that window.
func TestGCLeavesFileNotYetInLSM(t *testing.T) {
	opt := DefaultOptions(t.TempDir()).WithValueThreshold(16).WithValueLogMaxEntries(4).
		WithNumCompactors(0).WithLogger(nil)
	db := openForTest(t, opt)
	db.vlog.filesLock.RLock()
	first := db.vlog.maxFid
	db.vlog.filesLock.RUnlock()

	var gcRan bool
	var gcErr error
	db.vlogWrittenHook = func() {
		db.vlog.filesLock.RLock()
		rotated := db.vlog.maxFid != first
		db.vlog.filesLock.RUnlock()
		if gcRan || !rotated {
			return
		}
		gcRan = true
		// Compactions may well have counted most of the file as garbage
		// (values of keys deleted or overwritten meanwhile).
		db.vlog.discardStats.Update(first, 1<<30)
		gcErr = db.RunValueLogGC(0.01)
	}
	// One batch of five values, more than a file holds: all in the first
	// file, then the writer rotates.
	value := func(i int) []byte { return bytes.Repeat([]byte{byte('a' + i)}, 64) }
	err := db.Update(func(txn *Txn) error {
		for i := range 5 {
			if err := txn.Set(fmt.Appendf(nil, "k%d", i), value(i)); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if !gcRan {
		t.Fatal("the batch did not rotate the value log: the test no longer reaches the window")
	}
	if gcErr != ErrNoRewrite {
		t.Errorf("collection inside the window: %v, want ErrNoRewrite", gcErr)
	}
	err = db.View(func(txn *Txn) error {
		for i := range 5 {
			item, err := txn.Get(fmt.Appendf(nil, "k%d", i))
			if err != nil {
				return err
			}
			v, err := item.ValueCopy(nil)
			if err != nil {
				return fmt.Errorf("k%d: %w", i, err)
			}
			if !bytes.Equal(v, value(i)) {
				return fmt.Errorf("k%d = %q, want %q", i, v, value(i))
			}
		}
		return nil
	})
	if err != nil {
		t.Error(err)
	}
	// Once the batch is in the tree the file is collected as before: its
	// values are live, so they move, and the file goes.
	if err := db.RunValueLogGC(0.01); err != nil {
		t.Errorf("collection after the batch: %v", err)
	}
	db.vlog.filesLock.RLock()
	_, kept := db.vlog.filesMap[first]
	db.vlog.filesLock.RUnlock()
	if kept {
		t.Errorf("value-log file %d was not collected after its batch reached the tree", first)
	}
}

// openForTest opens a database with opt and closes it when the test ends,
// failing the test if either fails.
func openForTest(t *testing.T, opt Options) *DB {
	t.Helper()
	db, err := Open(opt)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := db.Close(); err != nil {
			t.Error(err)
		}
	})
	return db
}
