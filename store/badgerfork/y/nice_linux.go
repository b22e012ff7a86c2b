package y

import (
	"runtime"

	"golang.org/x/sys/unix"
)

// RunLowered runs f on a goroutine locked to an OS thread other than the
// process's main one, at nice value nice (1 to 19: the higher, the less
// of a contended core it gets), and returns when f does; so that
// background work yields the cores to the writes and reads in flight
// (ingestd's change). That thread ends with f's goroutine instead of
// going back to the runtime's pool at the lowered priority. The main
// thread is never lowered: the runtime cannot end it, and ps reports its
// priority as the process's. nice 0 runs f in the calling goroutine; a
// failed setpriority runs it at the usual priority.
func RunLowered(nice int, f func()) {
	if nice <= 0 {
		f()
		return
	}
	// Locked and waiting, the caller's thread cannot run f's goroutine.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	done := make(chan struct{})
	go func() {
		defer close(done)
		runtime.LockOSThread()
		if unix.Gettid() == unix.Getpid() {
			// The main thread, held while f runs on another, and left
			// as it was.
			RunLowered(nice, f)
			runtime.UnlockOSThread()
			return
		}
		// On Linux, PRIO_PROCESS with a thread id sets that thread alone.
		_ = unix.Setpriority(unix.PRIO_PROCESS, unix.Gettid(), min(nice, 19))
		f() // returns locked: the runtime ends the thread
	}()
	<-done
}
