package ilp

import (
	"errors"
	"flag"
	"fmt"
	"time"

	"github.com/ingestd/ingestd/feed"
)

// Default values of Config.
const (
	DefaultMaxBodyBytes = 32 << 20
	// DefaultMaxInflightWriteBytes holds two bodies of DefaultMaxBodyBytes
	// with their parsed form's estimate (parsedBytes) for TSBS-like lines
	// (a 32 MiB body of them parses to about 92 MB more): bodies of tiny
	// lines, whose parsed form is many times their size, take the room
	// of larger ones. An open-loop load above capacity (1,000-line bodies
	// at 90 k lines/s) grew RSS to 1.3 GiB when only bodies counted,
	// under 256 MiB.
	DefaultMaxInflightWriteBytes = 128 << 20
	// DefaultMaxWriteDelay is far above the time a write takes in a
	// server that keeps up (milliseconds), so only overload trips it,
	// and low enough that a client with a bounded number of requests in
	// flight (64 in the soak harness, one per Telegraf output) is
	// answered before its own queue grows: at 170 writes a second, 64
	// slots hold writes of at most 0.38 s. At 100 ms, a 10-s burst of
	// 500 writes a second (1,000 lines each) saw 144 of them refused and
	// retried, p99 1.3 s; at 250 ms none, p99 0.42 s.
	DefaultMaxWriteDelay = 250 * time.Millisecond
	// DefaultWriteQueueTimeout is DefaultMaxWriteDelay: a burst of bodies
	// arriving together (a fleet of agents flushing on the same tick)
	// waits its turn rather than being refused. At 50 ms, 39 bodies of
	// 5,000 lines sent at once saw 25 refused, and the burst took 1.3 s
	// with their retries against 0.6 s.
	DefaultWriteQueueTimeout = DefaultMaxWriteDelay
	// DefaultOverloadQueueTimeout keeps an overloaded server's refusals
	// within 100 ms of a request's arrival with room for reading its body:
	// at twice the sustainable rate (1,000 series, 180,000 lines/s), the
	// bodies that waited the full 250 ms for a parse slot behind a memtable
	// flush were the slowest 503s.
	DefaultOverloadQueueTimeout = 50 * time.Millisecond
	DefaultTCPAddr              = ":9009"
	DefaultTCPFlushInterval     = 100 * time.Millisecond
	DefaultTCPBatchLines        = 10_000
	DefaultTCPBatchBytes        = 4 << 20
	DefaultTCPMaxConns          = 1024
	// DefaultTCPMaxBufferedBytes bounds what the TCP connections hold
	// together: their lines as read and parsed batches awaiting commit.
	DefaultTCPMaxBufferedBytes = 64 << 20
	// DefaultMaxParserCacheBytes is the default Config.MaxParserCacheBytes:
	// room for the caches of about a thousand connections of a few
	// thousand series each.
	DefaultMaxParserCacheBytes = 256 << 20
	DefaultTCPIdleTimeout      = 5 * time.Minute
)

// MaxLineBytesCeiling bounds --max-line-bytes: one line's fragment must fit
// a store value next to a full group commit (feed.Config.MaxGroupBytes).
const MaxLineBytesCeiling = 64 << 20

// Config configures ILP ingest over HTTP and TCP.
type Config struct {
	// Limits bound each line and name the parser accepts (Limits' fields).
	Limits Limits
	// MaxBodyBytes is the largest HTTP write body, counted after gzip
	// decompression (413 past it).
	MaxBodyBytes int64
	// MaxInflightWriteBytes bounds the bytes of HTTP write bodies held at
	// once (after decompression, counted as they arrive, until each write
	// is answered). A write that finds no room waits at most the submit
	// timeout for it, then is answered 503. Must exceed MaxBodyBytes.
	MaxInflightWriteBytes int64
	// MaxWriteDelay refuses HTTP writes with 503 and Retry-After (1 to 3
	// s at random), before their bodies are parsed, while writes take
	// longer than it in the server: each interval of this length in
	// which even the fastest write answered took longer (or none was
	// answered while some were in flight) adds a tenth of the arrivals
	// to the share refused, spread evenly, and each interval under it
	// takes a twentieth off, but the writes taken in a second are never
	// cut below nine tenths of the most answered in one of the ten
	// seconds before; every write is refused while the sequencer's queue
	// delay (feed.Sequencer's QueueDelay) exceeds it. An overloaded
	// server answers at once what it cannot take instead of holding
	// writes for seconds, keeps the latency of those it takes near this
	// bound, and keeps committing near its capacity. 0: never.
	MaxWriteDelay time.Duration
	// WriteConcurrency is how many HTTP write bodies are parsed at once;
	// a read body waits for one of these slots in arrival order (see
	// parseSlots). 0: GOMAXPROCS.
	WriteConcurrency int
	// WriteQueueTimeout is the longest a read HTTP write body waits for a
	// parse slot; past it the write is answered 503 with Retry-After
	// and nothing of it is written, at once when its wait, predicted
	// from the bodies ahead and how long a body holds a slot of late,
	// is more than twice as long.
	WriteQueueTimeout time.Duration
	// OverloadQueueTimeout replaces WriteQueueTimeout while the server is
	// refusing writes as overloaded (by MaxWriteDelay's share or stall
	// rule, or for want of a parse slot, within the last second): a body
	// waits for a parse slot at most this long (one waiting already as
	// the server begins to count as overloaded, this long from the start
	// of its wait), and is refused at once when its predicted wait is
	// longer, so that what an overloaded server cannot take is answered
	// quickly. At most WriteQueueTimeout (a larger value counts as it);
	// must be positive.
	OverloadQueueTimeout time.Duration
	// TCPAddr is the TCP listen address; empty disables TCP.
	TCPAddr string
	// TCPFlushInterval is the longest a line read over TCP waits before it
	// is handed to the sequencer.
	TCPFlushInterval time.Duration
	// TCPBatchLines hands a TCP batch to the sequencer once it holds this
	// many lines.
	TCPBatchLines int
	// TCPBatchBytes hands a TCP batch to the sequencer once its lines hold
	// this many bytes. With TCPBatchLines it bounds what one connection
	// buffers while the sequencer is saturated (it then stops reading).
	TCPBatchBytes int
	// TCPMaxConns caps concurrent TCP connections. A connection accepted
	// at the cap makes room by closing, of the peer address holding the
	// most connections, the one longest without a complete line (which first commits every
	// complete line it has read), so a new writer is never turned away
	// and an address churning connections evicts its own.
	TCPMaxConns int
	// TCPMaxBufferedBytes bounds the bytes all TCP connections hold
	// together: the lines of their batches from arrival until committed
	// (parsed, about five times their size), and their partial lines past
	// the first 64 KiB, which take at most half of it (a line that finds
	// no room is dropped as too long). A connection whose next line finds
	// no room submits its batch and stops reading until there is. Must
	// exceed 2 × Limits.MaxLineBytes.
	TCPMaxBufferedBytes int64
	// MaxParserCacheBytes bounds what the caches of every ILP parser hold
	// together (each TCP connection's and each idle HTTP parser's known
	// series and interned keys, each at most about 2 MiB): a cache that
	// finds no room does not grow, and its lines parse without its
	// shortcut.
	MaxParserCacheBytes int64
	// TCPIdleTimeout closes a connection that has sent no byte for this
	// long (its complete lines were committed already). Must be positive.
	TCPIdleTimeout time.Duration
}

// DefaultConfig returns the defaults.
func DefaultConfig() Config {
	return Config{
		Limits:                DefaultLimits(),
		MaxBodyBytes:          DefaultMaxBodyBytes,
		MaxInflightWriteBytes: DefaultMaxInflightWriteBytes,
		MaxWriteDelay:         DefaultMaxWriteDelay,
		WriteQueueTimeout:     DefaultWriteQueueTimeout,
		OverloadQueueTimeout:  DefaultOverloadQueueTimeout,
		TCPAddr:               DefaultTCPAddr,
		TCPFlushInterval:      DefaultTCPFlushInterval,
		TCPBatchLines:         DefaultTCPBatchLines,
		TCPBatchBytes:         DefaultTCPBatchBytes,
		TCPMaxConns:           DefaultTCPMaxConns,
		TCPIdleTimeout:        DefaultTCPIdleTimeout,
		TCPMaxBufferedBytes:   DefaultTCPMaxBufferedBytes,
		MaxParserCacheBytes:   DefaultMaxParserCacheBytes,
	}
}

// RegisterFlags registers ILP's flags on fs.
func (c *Config) RegisterFlags(fs *flag.FlagSet) {
	fs.Int64Var(&c.MaxBodyBytes, "max-body-bytes", c.MaxBodyBytes, "largest HTTP write body in bytes, after gzip decompression (413 past it)")
	fs.Int64Var(&c.MaxInflightWriteBytes, "http-max-inflight-write-bytes", c.MaxInflightWriteBytes,
		"bytes of HTTP write bodies held at once, after decompression (must exceed --max-body-bytes); past it a write waits --feed-submit-timeout for room, then 503")
	fs.DurationVar(&c.MaxWriteDelay, "http-write-max-delay", c.MaxWriteDelay,
		"answer a growing share of HTTP writes 503 with Retry-After at once, unparsed, while writes take longer than this in the server, a body over 1 MiB per MiB, never below 0.9 of the most writes answered in a second of the last 10 s (0: never)")
	fs.IntVar(&c.WriteConcurrency, "http-write-concurrency", c.WriteConcurrency,
		"HTTP write bodies parsed at once (0: GOMAXPROCS); a read body waits its turn at most --http-write-queue-timeout")
	fs.DurationVar(&c.WriteQueueTimeout, "http-write-queue-timeout", c.WriteQueueTimeout,
		"longest a read HTTP write body waits for one of --http-write-concurrency parse slots; past it, or at once when its predicted wait is twice as long, 503 with Retry-After, nothing written")
	fs.DurationVar(&c.OverloadQueueTimeout, "http-write-overload-queue-timeout", c.OverloadQueueTimeout,
		"longest a read HTTP write body waits for a parse slot while writes are being refused as overloaded (within the last second), in place of --http-write-queue-timeout; past it, or at once when its predicted wait is longer, 503 with Retry-After")
	fs.IntVar(&c.Limits.MaxLineBytes, "max-line-bytes", c.Limits.MaxLineBytes, "longest ILP line in bytes; a longer line is rejected")
	fs.IntVar(&c.Limits.MaxStringBytes, "ilp-max-string-bytes", c.Limits.MaxStringBytes, "longest tag value or string field in bytes")
	fs.StringVar(&c.TCPAddr, "tcp-addr", c.TCPAddr, "ILP TCP listen address (empty disables TCP)")
	fs.DurationVar(&c.TCPFlushInterval, "tcp-flush-interval", c.TCPFlushInterval, "longest a TCP line waits before it is committed")
	fs.IntVar(&c.TCPBatchLines, "ilp-tcp-batch-lines", c.TCPBatchLines, "TCP lines per batch handed to the sequencer")
	fs.IntVar(&c.TCPBatchBytes, "ilp-tcp-batch-bytes", c.TCPBatchBytes, "bytes of TCP lines per batch handed to the sequencer (bounds a connection's buffer)")
	fs.IntVar(&c.TCPMaxConns, "ilp-tcp-max-conns", c.TCPMaxConns, "most concurrent TCP connections; at the cap a new one closes, of the peer address holding the most, the one longest without a complete line")
	fs.Int64Var(&c.TCPMaxBufferedBytes, "ilp-tcp-max-buffered-bytes", c.TCPMaxBufferedBytes, "bytes all TCP connections hold together: lines of their batches until committed, and partial lines past 64 KiB (at most half of it; a line that finds no room is dropped as too long); a connection whose next line finds no room submits its batch and stops reading until there is")
	fs.Int64Var(&c.MaxParserCacheBytes, "ilp-max-parser-cache-bytes", c.MaxParserCacheBytes, "bytes the caches of all ILP parsers (each TCP connection's, each idle HTTP parser's: known series and interned keys) hold together; a cache without room stops growing, its lines parse without its shortcut")
	fs.DurationVar(&c.TCPIdleTimeout, "ilp-tcp-idle-timeout", c.TCPIdleTimeout, "close a TCP connection that has sent nothing for this long (must be positive)")
}

// Validate reports the first invalid setting.
func (c *Config) Validate() error {
	switch {
	case c.MaxBodyBytes < 1:
		return errors.New("ilp: --max-body-bytes must be positive")
	case c.MaxWriteDelay < 0:
		return errors.New("ilp: --http-write-max-delay must not be negative")
	case c.WriteConcurrency < 0:
		return errors.New("ilp: --http-write-concurrency must not be negative")
	case c.WriteQueueTimeout <= 0:
		return errors.New("ilp: --http-write-queue-timeout must be positive")
	case c.OverloadQueueTimeout <= 0:
		return errors.New("ilp: --http-write-overload-queue-timeout must be positive")
	case c.MaxInflightWriteBytes <= c.MaxBodyBytes:
		return fmt.Errorf("ilp: --http-max-inflight-write-bytes=%d must exceed --max-body-bytes=%d", c.MaxInflightWriteBytes, c.MaxBodyBytes)
	case c.TCPMaxBufferedBytes <= 2*int64(c.Limits.MaxLineBytes)+2*tcpBudgetChunk:
		return fmt.Errorf("ilp: --ilp-tcp-max-buffered-bytes=%d must exceed twice --max-line-bytes=%d and 128 KiB", c.TCPMaxBufferedBytes, c.Limits.MaxLineBytes)
	case c.MaxParserCacheBytes < 0:
		return errors.New("ilp: --ilp-max-parser-cache-bytes must not be negative")
	case c.Limits.MaxLineBytes < 1 || c.Limits.MaxLineBytes > MaxLineBytesCeiling:
		return fmt.Errorf("ilp: --max-line-bytes must be within 1..%d", MaxLineBytesCeiling)
	case c.Limits.MaxKeyBytes < 1 || c.Limits.MaxKeyBytes > feed.MaxNameBytesCeiling:
		return fmt.Errorf("ilp: the key limit (--max-name-bytes) must be within 1..%d", feed.MaxNameBytesCeiling)
	case c.Limits.MaxStringBytes < 1:
		return errors.New("ilp: --ilp-max-string-bytes must be positive")
	case c.TCPFlushInterval <= 0:
		return errors.New("ilp: --tcp-flush-interval must be positive")
	case c.TCPBatchLines < 1:
		return errors.New("ilp: --ilp-tcp-batch-lines must be positive")
	case c.TCPBatchBytes < 1:
		return errors.New("ilp: --ilp-tcp-batch-bytes must be positive")
	case c.TCPMaxConns < 1:
		return errors.New("ilp: --ilp-tcp-max-conns must be positive")
	case c.TCPIdleTimeout <= 0:
		return errors.New("ilp: --ilp-tcp-idle-timeout must be positive")
	}
	return nil
}
