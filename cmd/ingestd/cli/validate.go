package cli

import (
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"
)

// ValidateAddr checks a listen or dial address of the form host:port, as
// net.Listen takes it, without binding it: the host is empty (every
// interface), an IP address (IPv6 in brackets) or a host name, and the port
// a number from 0 (any free port) to 65535. Service names (":http") are
// refused: the help says a port is a number.
func ValidateAddr(addr string) error {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("%q is not HOST:PORT (e.g. :8086, 127.0.0.1:8086, [::1]:8086)", addr)
	}
	n, err := strconv.ParseUint(port, 10, 32)
	if err != nil || n > 65535 {
		return fmt.Errorf("%q: port %q is not a number from 0 to 65535", addr, port)
	}
	if host != "" && net.ParseIP(host) == nil && !isHostName(host) {
		return fmt.Errorf("%q: host %q is neither an IP address nor a host name", addr, host)
	}
	return nil
}

// isHostName reports whether h is a DNS host name: dot-separated labels of
// 1 to 63 letters, digits and hyphens, not starting or ending with a
// hyphen, 253 bytes at most.
func isHostName(h string) bool {
	h = strings.TrimSuffix(h, ".")
	if h == "" || len(h) > 253 {
		return false
	}
	for label := range strings.SplitSeq(h, ".") {
		if label == "" || len(label) > 63 || label[0] == '-' || label[len(label)-1] == '-' {
			return false
		}
		for _, c := range []byte(label) {
			if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-') {
				return false
			}
		}
	}
	return true
}

// ValidateURL checks an http:// or https:// URL with a host (a valid
// HOST[:PORT]); the path and query are not checked.
func ValidateURL(raw string) error {
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("%q is not an http:// or https:// URL with a host", raw)
	}
	if u.Port() == "" {
		return nil
	}
	return ValidateAddr(u.Host)
}
