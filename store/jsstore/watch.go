package jsstore

import (
	"context"
	"encoding/json"
	"errors"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// errEnded is returned for a live instance another process truncated or
// dropped: this process no longer follows it (doc.go, "Several ingestd
// nodes") and refuses to write it rather than acknowledge writes no
// other node reads.
var errEnded = errors.New("truncated or dropped through another ingestd node: restart this node to follow the table")

// watchRecords follows the table records other processes write (until ctx
// ends) and marks a live table whose instance another process ended
// (table.ended).
func (s *Store) watchRecords(ctx context.Context) {
	for ctx.Err() == nil {
		err := s.watchOnce(ctx)
		if ctx.Err() != nil {
			return
		}
		s.logger.Warn("watching the table records failed: starting again", "err", err)
		select {
		case <-ctx.Done():
		case <-time.After(time.Second):
		}
	}
}

func (s *Store) watchOnce(ctx context.Context) error {
	return s.eachRecord(ctx, []jetstream.WatchOpt{jetstream.UpdatesOnly()}, func(e jetstream.KeyValueEntry) (bool, error) {
		var rec record
		if e == nil || json.Unmarshal(e.Value(), &rec) != nil || rec.Writer == s.node {
			return false, nil // the end of the (empty) current ones; not a record; this process's
		}
		s.mu.Lock()
		defer s.mu.Unlock()
		t := s.byName[string(rec.Name)]
		if t != nil && !t.rec.Meta.Dropped && (rec.Meta.Dropped || rec.Meta.ID != t.rec.Meta.ID) && !t.ended {
			t.ended = true
			s.logger.Warn("a table was truncated or dropped through another ingestd node: writes to it fail until this node restarts", "table", t.rec.Meta.Name)
		}
		return false, nil
	})
}
