package badger

import (
	"bytes"
	"fmt"
	"testing"
)

// TestSerialCompactions checks a change ingestd makes to badger
// (FORK.md): with SerialCompactions an L0 compaction spanning several key
// ranges and output tables, built in the compactor's goroutine, keeps
// every key's latest value. Were the tables sent before their collector
// ran, the compaction would block on its third table and Flatten never
// return.
func TestSerialCompactions(t *testing.T) {
	opt := DefaultOptions(t.TempDir()).WithSerialCompactions(true).WithMemTableSize(1 << 20).
		WithBaseTableSize(64 << 10).WithBaseLevelSize(256 << 10).WithNumLevelZeroTables(2).
		WithNumLevelZeroTablesStall(4).WithValueThreshold(1 << 10).WithLogger(nil)
	db := openForTest(t, opt)
	const keys = 40_000
	value := func(i, round int) []byte { return fmt.Appendf(bytes.Repeat([]byte{'v'}, 48), "%d/%d", i, round) }
	for round := range 3 {
		wb := db.NewWriteBatch()
		for i := range keys {
			if round > 0 && i%round != 0 {
				continue // round 1 writes every key again, round 2 every other one
			}
			if err := wb.Set(fmt.Appendf(nil, "key%08d", i), value(i, round)); err != nil {
				t.Fatal(err)
			}
		}
		if err := wb.Flush(); err != nil {
			t.Fatal(err)
		}
	}
	if err := db.Flatten(2); err != nil {
		t.Fatal(err)
	}
	deep := 0
	for _, l := range db.Levels() {
		if l.Level > 0 {
			deep += l.NumTables
		}
	}
	if deep < 3 {
		t.Fatalf("compactions left %d tables below level 0, want several: %s", deep, db.LevelsToString())
	}
	err := db.View(func(txn *Txn) error {
		for i := range keys {
			item, err := txn.Get(fmt.Appendf(nil, "key%08d", i))
			if err != nil {
				return fmt.Errorf("key %d: %w", i, err)
			}
			round := 1 // every key was written again in round 1
			if i%2 == 0 {
				round = 2
			}
			got, err := item.ValueCopy(nil)
			if err != nil {
				return err
			}
			if want := value(i, round); !bytes.Equal(got, want) {
				return fmt.Errorf("key %d: %q, want %q", i, got, want)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
