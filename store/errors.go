package store

import (
	"errors"
	"fmt"
)

var (
	// ErrLocked is returned by Open when another process holds the data
	// directory.
	ErrLocked = errors.New("store: data directory is in use by another process")
	// ErrVersion is returned by Open when the data directory holds a layout
	// version this build does not read.
	ErrVersion = errors.New("store: unsupported layout version")
	// ErrDiskFull is returned by Open and by every write when the data
	// directory's file system has less free space than
	// Config.MinFreeBytes; nothing is written.
	ErrDiskFull = errors.New("store: data directory is full")
	// ErrClosed is returned by every method called after Close.
	ErrClosed = errors.New("store: closed")
	// ErrEnded is returned by a Shared backend's PutTable, TruncateTable
	// and DropTable for an instance another process ended meanwhile
	// (TRUNCATE, DROP): the caller's view of the table is older than the backend's,
	// whose report of the change (Shared.Follow) is on its way.
	ErrEnded = errors.New("store: table instance ended by another process")
	// ErrUnavailable wraps the error of a backend that stores over the
	// network (store/jsstore) when the service did not answer within the
	// backend's timeout: nothing of the call may be assumed durable (a
	// write may still land later, at numbers never assigned to anything
	// else), and the same call may succeed once the service answers. The
	// caller fails the operation and goes on; every other error of a
	// write is the backend's own storage failing.
	ErrUnavailable = errors.New("store: unavailable")
)

// CorruptionError is returned when a stored key or value cannot be decoded.
type CorruptionError struct {
	// Key is the backend's key (or record id) that failed to decode.
	Key []byte
	// Err is the decoding error.
	Err error
}

// Error renders the key and the decoding error.
func (e *CorruptionError) Error() string {
	return fmt.Sprintf("store: corrupt value at key %q: %v", e.Key, e.Err)
}

// Unwrap returns the decoding error.
func (e *CorruptionError) Unwrap() error { return e.Err }

// ErrHistoryExpired is returned by ReadSeq when the read starts below the
// table's history horizon as the read's own view sees it: a fragment the
// read would return has been removed (or its history trimmed).
var ErrHistoryExpired = errors.New("store: feed history expired")

// ErrNotServed is returned by ReadSeq, ReadRows and TableStats of a
// Shared backend for a table this process does not materialise
// (store/jsstore's Config.Materialise): another process serves its reads.
// The table's writes, DDL and numbering work as on any other.
var ErrNotServed = errors.New("store: this node does not materialise the table")

// ErrRowLeftOut, returned by a ReadRows visit function, ends the page
// before the row it was called with: ReadRows returns no error and a
// cursor that resumes at that row.
var ErrRowLeftOut = errors.New("store: row left out of the page")

// ErrInvalidCursor is returned by ReadRows for a cursor the backend did
// not issue.
var ErrInvalidCursor = errors.New("store: invalid row cursor")
