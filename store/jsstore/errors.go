package jsstore

import "errors"

// errCodec is wrapped by every decoding failure of a block message.
var errCodec = errors.New("jsstore: malformed block message")

// errBarrierStopped is returned by Beyond calls waiting for a barrier
// when the store closes.
var errBarrierStopped = errors.New("jsstore: barrier: the store is closing")
