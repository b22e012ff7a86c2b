// Package crashtest proves the feed's promises against the real ingestd
// binary, from the outside: it builds cmd/ingestd, runs it as a child
// process and talks to it only over HTTP and TCP, as a user would.
//
//   - TestCrashCycles SIGKILLs the daemon at random moments under
//     concurrent HTTP and TCP writers and a draining consumer, with a
//     table whose short retention the sweeper applies all the time,
//     another truncated every 100 ms and the value-log collector running
//     every 50 ms, so that kills land inside sweeps, TRUNCATEs and
//     collections too; it restarts the daemon on the same data directory
//     and checks, after every cycle, that no acknowledged line still
//     retained is lost, nothing aged stays, no x_seq is reused or runs
//     backwards, epochs never go back, a drain from the history horizon
//     reads on and the consumer's replica equals the source
//     (-crash.cycles, -crash.duration).
//   - TestShutdownUnderLoad, TestSecondProcess, TestUnwritableDataDir and
//     TestDiskFull cover SIGTERM, the directory lock and storage failures.
//   - TestBackPressure saturates the sequencer: 503 with Retry-After, TCP
//     flow control, nothing acknowledged lost, memory within the bound of
//     docs/operations.md#memory.
//   - TestHostileTableChurnDisk creates, writes, truncates and drops
//     tables over and over and bounds the data directory's size at cycle
//     N by twice its size at cycle N/32 (-churn.cycles).
//   - TestJetStreamFaults and TestJetStreamLeaderKills (docs/design.md#fault-tests) run the
//     binary on --store=jetstream against an embedded 3-server cluster
//     (store/jsstore/natstest, in the test process) and kill, stop or cut
//     off the table stream's leader, stop a follower and SIGKILL ingestd
//     under HTTP writers and a draining consumer, checking after each
//     fault that nothing acknowledged is lost, no x_seq repeats or moves
//     and a drain from 0 equals the consumer's replica
//     (-jetstream.kills).
//   - TestPGMirrorCrash SIGKILLs `ingestd mirror --target postgres://…`
//     15 times at random moments while the source is written (points
//     rewritten by fragments, new columns, one TRUNCATE and its resync),
//     restarting it each time, and requires the PostgreSQL table to equal
//     the source point for point and the cursor never to move back;
//     TestPGMirrorConcurrent does the same with two mirrors running at
//     once on one target (docs/design.md#mirror-into-postgresql).
//
// The package holds tests only; of the module they import only the HTTP
// client (httpapi/client, which imports nothing of the daemon), so they
// check the binary's contract and nothing else, the JetStream tests
// natstest, which runs the NATS servers the binary connects to, and the
// PostgreSQL tests pgtest, which runs the cluster the mirror writes to. Each daemon is started
// with --ports-file and found through it. The storage and memory
// tests need Linux (/proc, and mount(2) for a small tmpfs: as root; they
// skip, saying why, when mounting is not allowed).
package crashtest
