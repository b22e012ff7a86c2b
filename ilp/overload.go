package ilp

import (
	"math/rand/v2"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// overload decides whether HTTP writes are refused unparsed (503), after
// CoDel: on the time writes spend in the server, not on a queue's length.
// Over each interval of target it keeps the least latency of the writes
// answered (from the end of the body, which a client may send as slowly
// as it likes, to the answer: parsing, the sequencer's queue and the
// commit). An interval is over when even that least one took longer than
// target, or none was answered while some were in flight all interval
// long. The share of writes refused grows by shareStep after each
// interval over and shrinks by shareStep/2 after each one under, so that
// it settles near the share the server cannot take: offered twice what it
// commits, it refuses about half, spread evenly over the arrivals, and
// commits at full speed with writes near target, where refusing every
// write of an interval would leave it idle and send every refused client
// back at once. Refused writes' bodies are read and dropped unparsed
// (discardSmallBody), which frees the CPU and the queue for those in
// flight and the ones after. A sequencer whose own queue delay passes
// target (queueDelayer: a commit stalled) refuses every write at once. A
// body larger than overloadUnitBytes takes its time to parse and commit
// however idle the server: its latency counts per overloadUnitBytes (a 10
// MiB body answered in 1 s counts as 100 ms), and it is never a write held
// over an interval, so that one client sending large bodies one after the
// other is never refused. The share never cuts the writes taken below a
// floor: floorPerMille of the most writes answered in one of the last
// floorSeconds seconds, taken evenly over each second. Latency can pass
// target for reasons refusing does not cure (a compaction sharing the
// cores, a slow fsync), and the share then climbs past what the server
// cannot take; the floor keeps it from refusing what the server has just
// shown it commits. It follows a capacity that really drops at a tenth
// per floorSeconds, while the parse slots' queue (parseSlots) refuses
// what it could not start in time. Safe for concurrent use.
type overload struct {
	target time.Duration // 0: never refuse
	delay  func() time.Duration
	// lastRefused is when a write was last refused as overloaded (by
	// admit or for want of a parse slot), in Unix nanoseconds.
	lastRefused atomic.Int64
	// onRefusing, when set, is called as the server begins to count as
	// refusing: the first refusal after refusingFor without one, or the
	// share rising from none. It must not call o's methods.
	onRefusing func()

	mu       sync.Mutex
	start    time.Time     // of the current interval
	least    time.Duration // least latency answered in it; -1: none yet
	inflight int           // writes of at most overloadUnitBytes read (begin), not yet answered
	heldOver bool          // such a write was in flight all through the current interval so far
	share    int           // per mille of the writes arriving now that are refused
	credit   int           // share accumulated per arrival: at 1000 a write is refused
	lastSlow time.Duration // the least latency of the last interval over target

	// answered counts the writes answered after reaching the sequencer in
	// each of the last floorSeconds seconds (since the Unix epoch, at
	// index second % floorSeconds), second the second each one counts.
	answered [floorSeconds]int
	second   [floorSeconds]int64
	// admitted counts the writes taken in the second admittedIn.
	admitted   int
	admittedIn int64
}

// The floor under the share: writes are taken at floorPerMille of the
// most answered in one of the last floorSeconds seconds.
const (
	floorSeconds  = 10
	floorPerMille = 900
)

// Why admit refuses a write.
const (
	causeShare   = "share"   // the share refused, writes slower than the target
	causeStalled = "stalled" // the sequencer's queue delay past the target
)

// refusingFor is how long after a write was refused as overloaded the
// server still counts as refusing (overload.refusing).
const refusingFor = time.Second

// overloadUnitBytes is the body size up to which a write's whole latency
// counts: about 5,000–10,000 lines, the batches of Telegraf and the
// InfluxDB clients.
const overloadUnitBytes = 1 << 20

// shareStep is how much of the arrivals (per mille) one interval over
// target adds to the refused share; half of it comes off per interval
// under. From none to half in five intervals.
const shareStep = 100

func newOverload(target time.Duration, delay func() time.Duration) *overload {
	return &overload{target: target, delay: delay, least: -1}
}

// roll ends the current interval when it is over and moves the share.
// Called with o.mu held.
func (o *overload) roll(now time.Time) {
	if now.Sub(o.start) < o.target {
		return
	}
	if o.least > o.target || (o.least < 0 && o.heldOver) {
		if o.share == 0 && o.onRefusing != nil {
			o.onRefusing()
		}
		o.share = min(1000, o.share+shareStep)
		o.lastSlow = max(o.least, o.target)
	} else {
		o.share = max(0, o.share-shareStep/2)
	}
	if o.share == 0 {
		o.credit = 0
	}
	o.start, o.least, o.heldOver = now, -1, o.inflight > 0
}

// admit reports whether a write arriving at now is taken, and if not why
// (causeShare or causeStalled) and how long writes take (for the
// refusal's message).
func (o *overload) admit(now time.Time) (ok bool, cause string, delay time.Duration) {
	if o.target <= 0 {
		return true, "", 0
	}
	if o.delay != nil {
		if d := o.delay(); d > o.target {
			o.refused(now)
			return false, causeStalled, d
		}
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	o.roll(now)
	sec := now.Unix()
	if sec != o.admittedIn {
		o.admitted, o.admittedIn = 0, sec
	}
	if o.credit += o.share; o.credit >= 1000 {
		o.credit -= 1000
		// The floor, spread over the second: by its k-th millisecond,
		// k/1000 of it.
		ms := int64(now.Nanosecond()/int(time.Millisecond)) + 1
		if int64(o.admitted) >= int64(o.floor(sec))*floorPerMille*ms/1_000_000 {
			o.refused(now)
			return false, causeShare, o.lastSlow
		}
	}
	o.admitted++
	return true, "", 0
}

// refused records that a write was refused as overloaded at now. With
// the rule off (no target) the server never counts as overloaded, and
// nothing is recorded.
func (o *overload) refused(now time.Time) {
	if o.target <= 0 {
		return
	}
	if last := o.lastRefused.Swap(now.UnixNano()); now.UnixNano()-last >= int64(refusingFor) && o.onRefusing != nil {
		o.onRefusing()
	}
}

// refusing reports whether the server counts as overloaded at now:
// writes are being refused (a share of them, or all while the sequencer
// stalls), or one was refused within refusingFor. Writes then wait for a
// parse slot at most Config.OverloadQueueTimeout (parseSlots).
func (o *overload) refusing(now time.Time) bool {
	if o.target <= 0 {
		return false
	}
	if now.UnixNano()-o.lastRefused.Load() < int64(refusingFor) {
		return true
	}
	if o.delay != nil && o.delay() > o.target {
		return true
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	o.roll(now)
	return o.share > 0
}

// floor is the most writes answered in one of the floorSeconds seconds
// before sec. Called with o.mu held.
func (o *overload) floor(sec int64) int {
	most := 0
	for i, s := range o.second {
		if s < sec && s >= sec-floorSeconds {
			most = max(most, o.answered[i])
		}
	}
	return most
}

// begin records that a write's body of size bytes was read at now; done
// must follow once it is answered.
func (o *overload) begin(now time.Time, bytes int64) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.roll(now)
	if bytes <= overloadUnitBytes {
		o.inflight++
	}
}

// done records that a write whose body of size bytes was read at start
// was answered at now; its latency counts when it reached the sequencer (measured), not
// when it was refused before (a bad line, a forbidden table), which a
// client could send to hide an overload.
func (o *overload) done(start, now time.Time, measured bool, bytes int64) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.roll(now)
	d := now.Sub(start)
	if bytes <= overloadUnitBytes {
		o.inflight--
	} else {
		d = time.Duration(float64(d) * overloadUnitBytes / float64(bytes))
	}
	if measured && (o.least < 0 || d < o.least) {
		o.least = d
	}
	if measured {
		sec := now.Unix()
		i := sec % floorSeconds
		if o.second[i] != sec {
			o.second[i], o.answered[i] = sec, 0
		}
		o.answered[i]++
	}
}

// overloadRetryAfter is the Retry-After of a write refused because the
// server is overloaded: 1 to 3 seconds at random, so that the clients
// refused in one moment do not all come back in the same one.
func overloadRetryAfter() string {
	return strconv.Itoa(1 + rand.IntN(3))
}
