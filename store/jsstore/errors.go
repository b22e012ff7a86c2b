package jsstore

import "errors"

// ErrConflict is returned by Append when a table's stream holds a block
// this node did not write (another ingestd node writing the same table:
// phase 1 runs one node per cluster). Nothing of the commit becomes
// readable; the next Append numbers above the other block.
var ErrConflict = errors.New("jsstore: another writer appended to the table's stream (run one ingestd node per cluster)")

// errCodec is wrapped by every decoding failure of a block message.
var errCodec = errors.New("jsstore: malformed block message")
