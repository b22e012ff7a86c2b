package ilp

import (
	"fmt"
	"time"

	"github.com/ingestd/ingestd/feed"
)

// Precision is the unit of ILP timestamps: the number of nanoseconds in one
// unit (1 for ns, 3.6e12 for h).
type Precision int64

// The precisions of InfluxDB 1.x (all) and 2.x (ns, us, ms, s).
const (
	Nanosecond  Precision = 1
	Microsecond Precision = Precision(time.Microsecond)
	Millisecond Precision = Precision(time.Millisecond)
	Second      Precision = Precision(time.Second)
	Minute      Precision = Precision(time.Minute)
	Hour        Precision = Precision(time.Hour)
)

// ParsePrecision parses a precision parameter. An empty string means
// nanoseconds (Telegraf never sends it). v1 accepts InfluxDB 1.x's
// spellings (ns, n, u, us, ms, s, m, h), otherwise only 2.x's (ns, us, ms,
// s). Anything else is ErrUnknownPrecision.
func ParsePrecision(s string, v1 bool) (Precision, error) {
	switch s {
	case "", "ns":
		return Nanosecond, nil
	case "us":
		return Microsecond, nil
	case "ms":
		return Millisecond, nil
	case "s":
		return Second, nil
	}
	if v1 {
		switch s {
		case "n":
			return Nanosecond, nil
		case "u":
			return Microsecond, nil
		case "m":
			return Minute, nil
		case "h":
			return Hour, nil
		}
		return 0, fmt.Errorf("%w %s: want one of ns, n, u, us, ms, s, m, h", ErrUnknownPrecision, feed.QuoteInput(s))
	}
	return 0, fmt.Errorf("%w %s: want one of ns, us, ms, s", ErrUnknownPrecision, feed.QuoteInput(s))
}
