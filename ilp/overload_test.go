package ilp

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestOverloadVerdict walks the refusal test through its cases on a clock
// of its own: a write slower than the target refuses the next interval's
// writes, and the verdict holds for that interval; an interval with
// nothing slow admits again; a write held all through an interval with
// no answer refuses the next one; the least latency of an interval
// decides; answers refused before the sequencer do not count; a body
// being read is not a write in flight; a sequencer queue delay over the
// target refuses at once.
func TestOverloadVerdict(t *testing.T) {
	const target = time.Second
	const small = 100 << 10 // a body of 100 KiB
	var queue time.Duration
	o := newOverload(target, func() time.Duration { return queue })
	t0 := time.Unix(1000, 0)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	admit := func(ms int) bool {
		ok, _ := o.admit(at(ms))
		return ok
	}

	require.True(t, admit(0))
	o.begin(at(0), small)
	o.done(at(0), at(1500), true, small) // 1.5 s in the server
	require.False(t, admit(2600), "the fastest write of the last interval was slower than the target")
	require.False(t, admit(3500), "the verdict holds for the interval")
	require.True(t, admit(3700), "nothing answered slowly in the last interval")

	// A write read at 3.7 s is not answered for a while.
	o.begin(at(3700), small)
	require.True(t, admit(4800), "not yet held a whole interval")
	require.False(t, admit(5900), "a write was in flight all through the interval, none answered")
	o.done(at(3700), at(6000), true, small) // 2.3 s
	require.False(t, admit(7000), "the last interval's only answer was slow")

	// The least latency of an interval decides. (A latency lands in
	// the interval its answer does.)
	require.True(t, admit(8100), "nothing in flight, nothing answered")
	o.begin(at(8150), small)
	o.done(at(8150), at(8250), true, small) // 0.1 s
	o.begin(at(8200), small)
	o.done(at(8200), at(9050), true, small) // 0.85 s
	o.begin(at(9050), small)
	require.True(t, admit(9200), "the fastest answer of the last interval took 0.1 s")

	// Answers refused before the sequencer do not count.
	o.begin(at(9250), small)
	o.done(at(9250), at(9300), false, small)
	o.done(at(9050), at(10150), true, small) // 1.1 s
	require.False(t, admit(10300), "only the answers that reached the sequencer count")
	require.True(t, admit(11400))

	// A stalled sequencer refuses at once, whatever the last interval.
	queue = target + time.Millisecond
	ok, delay := o.admit(at(11500))
	require.False(t, ok)
	require.Equal(t, queue, delay)
	queue = 0
	require.True(t, admit(11600))

	ok, _ = newOverload(0, nil).admit(at(0))
	require.True(t, ok, "a zero target never refuses")

	// A large body counts its latency per overloadUnitBytes, and is never
	// held over an interval.
	require.True(t, admit(12700))
	o.begin(at(12700), 20*overloadUnitBytes)
	require.True(t, admit(14000), "a large body in flight all interval long is not held over")
	o.done(at(12700), at(15700), true, 20*overloadUnitBytes) // 3 s for 20 MiB: 150 ms per MiB
	require.True(t, admit(16800), "the large body's latency per MiB was under the target")
	o.begin(at(16800), 2*overloadUnitBytes)
	o.done(at(16800), at(19800), true, 2*overloadUnitBytes) // 3 s for 2 MiB: 1.5 s per MiB
	require.False(t, admit(20900), "a large body slower than the target per MiB")
}
