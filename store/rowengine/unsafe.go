package rowengine

import "unsafe"

// bytesString returns b as a string without copying. b must never be
// modified afterwards; block values read by ReadSeq are copied once into
// buffers that only these strings reference.
func bytesString(b []byte) string {
	if len(b) == 0 {
		return ""
	}
	return unsafe.String(&b[0], len(b))
}
