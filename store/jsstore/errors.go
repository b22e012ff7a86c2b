package jsstore

import "errors"

// errCodec is wrapped by every decoding failure of a block message.
var errCodec = errors.New("jsstore: malformed block message")
