package feed

import "github.com/ingestd/ingestd/store"

// Storage is what the feed needs from durable storage: the backend-neutral
// contract of store (see store.Backend and store/doc.go), without Close,
// which the owner of the backend calls once Run has returned.
// *badgerstore.DB, *jsstore.Store and *memstore.Store implement it. The
// sequencer goroutine calls the writer side (store.Appender, store.Tables,
// SweepBefore, RaiseHorizon); drains, copies and consumers call the read
// side concurrently.
type Storage interface {
	store.Loader
	store.Appender
	store.Tables
	store.Reader
	store.ConsumerStore
	store.Sweeper
	store.StatsReader
	// Limits is store.Backend's: what the feed checks its configuration,
	// points and schemas against.
	Limits() store.Limits
}
