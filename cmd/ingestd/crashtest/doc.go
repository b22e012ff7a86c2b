// Package crashtest proves the feed's promises against the real ingestd
// binary, from the outside: it builds cmd/ingestd, runs it as a child
// process and talks to it only over HTTP and TCP, as a user would.
//
//   - TestCrashCycles SIGKILLs the daemon at random moments under
//     concurrent HTTP and TCP writers and a draining consumer, restarts it
//     on the same data directory and checks, after every cycle, that no
//     acknowledged line is lost, no x_seq is reused or runs backwards and
//     the consumer's replica equals the source (-crash.cycles,
//     -crash.duration).
//   - TestCrashRetentionAndTruncate SIGKILLs it during retention sweeps,
//     TRUNCATEs and value-log collections: nothing retained is lost,
//     nothing aged stays, a drain from the history horizon reads on.
//   - TestShutdownUnderLoad, TestSecondProcess, TestUnwritableDataDir and
//     TestDiskFull cover SIGTERM, the directory lock and storage failures.
//   - TestBackPressure saturates the sequencer: 503 with Retry-After, TCP
//     flow control, nothing acknowledged lost, memory within the README's
//     bound.
//
// The package holds tests only; of the module they import only the HTTP
// client (httpapi/client, which imports nothing of the daemon), so they
// check the binary's contract and nothing else. Each daemon is started
// with --ports-file and found through it. The storage and memory
// tests need Linux (/proc, and mount(2) for a small tmpfs: as root; they
// skip, saying why, when mounting is not allowed).
package crashtest
