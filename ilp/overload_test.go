package ilp

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestOverloadShare walks the refusal law through its cases on a clock of
// its own, one interval (the target, 1 s) at a time: an interval whose
// fastest answer was slower than the target adds a tenth of the arrivals
// to the share refused, spread evenly over them; one under it takes off a
// twentieth; the least latency of an interval decides; answers refused
// before the sequencer do not count; a write in flight all through an
// interval with nothing answered counts as slow; ten slow intervals in a
// row refuse everything (no write answered a second before: no floor);
// a sequencer queue delay over the target refuses
// at once; a large body counts per overloadUnitBytes.
func TestOverloadShare(t *testing.T) {
	const target = time.Second
	const small = 100 << 10 // a body of 100 KiB
	const ms = time.Millisecond
	var queue time.Duration
	o := newOverload(target, func() time.Duration { return queue })
	t0 := time.Unix(1000, 0)
	at := func(msec int) time.Time { return t0.Add(time.Duration(msec) * ms) }
	refused := func(msec int) int { return refusedBy(t, o, at(msec)) }
	// answer answers at msec a write that took lat.
	answer := func(msec int, lat time.Duration, measured bool) {
		o.begin(at(msec), small)
		o.done(at(msec).Add(-lat), at(msec), measured, small)
	}

	require.Zero(t, refused(0))
	answer(500, 1500*ms, true)
	require.Equal(t, 10, refused(1000), "one interval over the target: a tenth refused")
	answer(1500, 1200*ms, true)
	require.Equal(t, 20, refused(2000), "two in a row: a fifth")
	answer(2100, 100*ms, true)
	answer(2200, 1500*ms, true)
	require.Equal(t, 15, refused(3000), "the fastest answer was under the target: half a step off")
	answer(3100, 10*ms, false)
	answer(3200, 1500*ms, true)
	require.Equal(t, 25, refused(4000), "only answers that reached the sequencer count")

	// A write read at 4.1 s is not answered until 6.5 s.
	o.begin(at(4100), small)
	require.Equal(t, 20, refused(5000), "in flight since after the interval began: not held over")
	require.Equal(t, 30, refused(6000), "in flight all through the interval, nothing answered")
	o.done(at(4100), at(6500), true, small)
	require.Equal(t, 40, refused(7000), "the interval's only answer took 2.4 s")

	for i := range 6 {
		answer(7500+1000*i, 1500*ms, true)
	}
	require.Equal(t, 100, refused(13500), "ten slow intervals: everything refused")
	require.Equal(t, 95, refused(14500), "nothing answered, nothing in flight: half a step off")

	// A stalled sequencer refuses at once, whatever the share.
	o2 := newOverload(target, func() time.Duration { return queue })
	queue = target + ms
	ok, cause, delay := o2.admit(at(0))
	require.False(t, ok)
	require.Equal(t, causeStalled, cause)
	require.Equal(t, queue, delay)
	queue = 0
	ok, _, _ = o2.admit(at(1))
	require.True(t, ok)

	ok, _, _ = newOverload(0, nil).admit(at(0))
	require.True(t, ok, "a zero target never refuses")

	// A large body counts its latency per overloadUnitBytes, and is never
	// held over an interval.
	o3 := newOverload(target, nil)
	require.Zero(t, refusedBy(t, o3, at(0)))
	o3.begin(at(0), 20*overloadUnitBytes)
	require.Zero(t, refusedBy(t, o3, at(1100)))
	require.Zero(t, refusedBy(t, o3, at(2200)), "a large body in flight all interval long is not held over")
	o3.done(at(0), at(3000), true, 20*overloadUnitBytes) // 3 s for 20 MiB: 150 ms per MiB
	require.Zero(t, refusedBy(t, o3, at(4000)), "the large body's latency per MiB was under the target")
	o3.begin(at(4000), 2*overloadUnitBytes)
	o3.done(at(2000), at(4900), true, 2*overloadUnitBytes) // 2.9 s for 2 MiB: 1.45 s per MiB
	require.Equal(t, 10, refusedBy(t, o3, at(5000)), "a large body slower than the target per MiB")
}

// refusedBy offers o 100 writes at now and returns how many it refused,
// checking that the refusals are spread: never two in a row while it
// refuses less than half.
func refusedBy(t *testing.T, o *overload, now time.Time) int {
	t.Helper()
	n, prev := 0, true
	for range 100 {
		ok, cause, _ := o.admit(now)
		require.True(t, ok || cause == causeShare, "refused for the share")
		require.False(t, !ok && !prev && o.share < 500, "two refusals in a row at a share of %d per mille", o.share)
		if !ok {
			n++
		}
		prev = ok
	}
	return n
}

// TestOverloadRefusing: the server counts as overloaded while writes are
// refused (a share, or all while the sequencer stalls) and for a second
// after a refusal, and never with the rule off; onRefusing is called as
// it begins to: a refusal after a second without one, the share rising
// from none.
func TestOverloadRefusing(t *testing.T) {
	var queue time.Duration
	o := newOverload(time.Second, func() time.Duration { return queue })
	began := 0
	o.onRefusing = func() { began++ }
	t0 := time.Unix(1000, 0)
	require.False(t, o.refusing(t0))
	o.refused(t0)
	o.refused(t0.Add(500 * time.Millisecond))
	require.True(t, o.refusing(t0.Add(1499*time.Millisecond)))
	require.False(t, o.refusing(t0.Add(1500*time.Millisecond)))
	require.Equal(t, 1, began)
	o.refused(t0.Add(1500 * time.Millisecond))
	require.Equal(t, 2, began)

	queue = 2 * time.Second
	require.True(t, o.refusing(t0.Add(2*time.Second)), "a stalled sequencer")
	queue = 0

	o.begin(t0.Add(2*time.Second), 1)
	o.done(t0, t0.Add(3*time.Second), true, 1) // 3 s: over the target
	require.True(t, o.refusing(t0.Add(4*time.Second)), "a share refused")
	require.Equal(t, 3, began)

	off := newOverload(0, nil)
	off.onRefusing = func() { t.Fatal("the rule off never begins to refuse") }
	off.refused(t0)
	require.False(t, off.refusing(t0))
}

// TestOverloadFloor: however high the share, the writes taken in a
// second are not cut below nine tenths of the most answered in one of the
// ten seconds before, spread over the second; a second after ten with
// none answered leaves no floor.
func TestOverloadFloor(t *testing.T) {
	const target = 100 * time.Millisecond
	o := newOverload(target, nil)
	t0 := time.Unix(2000, 0)
	// Seconds 0 and 1: 100 writes a second answered, each 300 ms after
	// it was read, so that every interval is over the target.
	for i := range 200 {
		now := t0.Add(time.Duration(i) * 10 * time.Millisecond)
		o.admit(now)
		o.begin(now, 1000)
		o.done(now.Add(-300*time.Millisecond), now, true, 1000)
	}
	require.Equal(t, 1000, o.share, "twenty intervals over: everything refused but for the floor")

	// Second 2: a write held in flight all through keeps every interval
	// over; 1,000 writes offered, evenly; 90 taken, evenly.
	o.begin(t0.Add(2*time.Second), 1000)
	taken := make([]int, 10)
	for i := range 1000 {
		now := t0.Add(2*time.Second + time.Duration(i)*time.Millisecond)
		if ok, _, _ := o.admit(now); ok {
			taken[i/100]++
		}
	}
	require.Equal(t, []int{9, 9, 9, 9, 9, 9, 9, 9, 9, 9}, taken, "nine tenths of 100 a second, a tenth of them in each tenth of the second")

	require.Equal(t, 1000, o.share)

	// Second 13, the write still in flight: nothing answered since
	// second 1, nothing taken.
	n := 0
	for i := range 1000 {
		if ok, _, _ := o.admit(t0.Add(13*time.Second + time.Duration(i)*time.Millisecond)); ok {
			n++
		}
	}
	require.Zero(t, n, "no write answered in the ten seconds before: no floor")
	require.Equal(t, 1000, o.share)
}
