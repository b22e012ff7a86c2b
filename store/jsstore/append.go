package jsstore

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/ingestd/ingestd/store"
	"github.com/ingestd/ingestd/store/rowengine"
)

// The headers of a block message (doc.go, "Block messages").
const (
	hdrInstance   = "Ingestd-Instance"    // the table instance id
	hdrSync       = "Ingestd-Sync"        // "1": the fragments get x_seq numbers; "0": unsynced
	hdrCount      = "Ingestd-Count"       // fragments in the message
	hdrCommitTime = "Ingestd-Commit-Time" // Unix nanoseconds
	hdrEncoding   = "Ingestd-Encoding"    // the body's encoding (codec.go); absent: encodingPlain
)

// maxBatchMessages is JetStream's default bound of an atomic batch.
const maxBatchMessages = 1000

// Append implements store.Appender: it writes each commit's Meta (new
// columns, or a table created by the write: PutTable's update), publishes
// every table's block (one message, or several above the server's
// max_payload), each message with a message id, all of them as one
// atomic batch (publishAll), and waits for its acknowledgement. The
// numbers come from the stream order: each table's follower numbers this
// process's messages when it reaches them (every message before them,
// any writer's, numbered first) and holds them; Append then sets
// FirstSeq, calls stamped, releases them and returns once the follower
// has applied them to the row cache, so the caller's watermark never
// passes a message the cache lacks. Writer only.
func (s *Store) Append(ctx context.Context, commits []store.TableCommit, stamped func()) (err error) {
	if err := s.gate.Enter(ctx); err != nil {
		return err
	}
	defer s.gate.Leave()
	tables := make([]*table, len(commits))
	defer func() {
		if err != nil {
			releaseAll(tables) // nothing stamps them: let the followers go on
		}
	}()
	for i := range commits {
		tc := &commits[i]
		var (
			t    *table
			void bool
		)
		if tc.Meta != nil { // new columns, or a table created by this write
			m := *tc.Meta
			m.ID = tc.TableID
			if m, t, err = s.putTable(m); err == nil && m.ID != tc.TableID {
				err = fmt.Errorf("jsstore: table %q is live as instance %d, not %d", m.Name, m.ID, tc.TableID)
			}
			if errors.Is(err, errVoid) {
				void, err = true, nil
			}
		} else {
			t, void, err = s.liveOrVoid(tc.TableID)
		}
		if err != nil {
			return err
		}
		tc.FirstSeq = 0
		if void { // ordered before the other process's TRUNCATE or DROP
			s.m.voided.Add(float64(len(tc.Fragments)))
			continue
		}
		tables[i] = t
	}
	jobs := make([]publishJob, len(commits))
	for i := range commits {
		if tables[i] == nil {
			continue
		}
		if jobs[i], err = s.prepare(tables[i], &commits[i], idAppend); err != nil {
			return err
		}
	}
	defer s.dropPending(s.addPending(jobs))
	sent := time.Now()
	sends, err := s.publishAll(jobs)
	if err != nil {
		return err
	}
	if sends > 0 {
		s.m.publishSeconds.Observe(time.Since(sent).Seconds())
	}
	deadline := time.Now().Add(s.cfg.PublishTimeout)
	for i, j := range jobs {
		if len(j.msgs) == 0 {
			continue
		}
		// The follower finds the first message by its id: a copy the
		// stream stored twice (a send retried to a new leader before the
		// first was applied) is numbered once, at the first copy.
		// Or the record's anchor passes the acknowledged sequence
		// without it: another process ended the instance (ordered before
		// the change) and may have purged the commit before this node
		// read it.
		firstID := j.msgs[0].Header.Get(jetstream.MsgIDHeader)
		var (
			own    ownMsg
			purged bool
		)
		err := s.awaitFollower(j.t, deadline, func() (ok bool) {
			if own, ok = j.t.f.heldID(firstID); ok {
				return true
			}
			purged = j.last > 0 && j.t.passed(j.last)
			return purged
		})
		if err != nil {
			return err
		}
		if purged {
			// Not purged yet, the follower numbers it as it comes (no
			// longer held: released) and counts it voided; passed
			// without it, it is counted here.
			if applied, _ := j.t.position(); applied >= j.last {
				s.m.voided.Add(float64(len(commits[i].Fragments)))
			}
			j.t.release(j.last)
			jobs[i].msgs = nil
			continue
		}
		jobs[i].last = own.seq + uint64(len(j.msgs)) - 1 // an atomic batch is contiguous
		if tc := &commits[i]; tc.Sync && len(tc.Fragments) > 0 {
			tc.FirstSeq = own.first
		}
	}
	if stamped != nil {
		stamped()
	}
	for _, j := range jobs {
		if len(j.msgs) > 0 {
			j.t.release(j.last)
		}
	}
	// jobs[i].last is now where the follower holds the commit.
	for _, j := range jobs {
		if len(j.msgs) == 0 {
			continue
		}
		if err := s.awaitFollower(j.t, deadline, func() bool { return j.t.passed(j.last) }); err != nil {
			return err
		}
	}
	return nil
}

// awaitFollower is t.await(deadline, ok), counting
// ingestd_jetstream_stream_behind_total when ok does not hold within
// behindAfter: the stream acknowledged what its consumer does not deliver
// yet (a new leader still applying its log), which is waited for.
func (s *Store) awaitFollower(t *table, deadline time.Time, ok func() bool) error {
	first := time.Now().Add(behindAfter)
	if deadline.Before(first) {
		first = deadline
	}
	if t.await(first, ok) == nil {
		return nil
	}
	s.m.behind.Inc()
	return t.await(deadline, ok)
}

// enterLive is gate.Enter, then live: it admits a call on live instance
// tid. On nil the caller must call gate.Leave.
func (s *Store) enterLive(ctx context.Context, tid uint64) (*table, error) {
	if err := s.gate.Enter(ctx); err != nil {
		return nil, err
	}
	t, err := s.live(tid)
	if err != nil {
		s.gate.Leave()
		return nil, err
	}
	return t, nil
}

// live returns the state of live instance tid.
func (s *Store) live(tid uint64) (*table, error) {
	t, void, err := s.liveOrVoid(tid)
	if void {
		return nil, fmt.Errorf("jsstore: table instance %d: %w", tid, store.ErrEnded)
	}
	return t, err
}

// liveOrVoid returns the state of live instance tid, or void when another
// process ended it (store.Shared: the writer's calls on it do nothing).
func (s *Store) liveOrVoid(tid uint64) (*table, bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if t, ok := s.byTID[tid]; ok {
		return t, false, nil
	}
	if _, ok := s.ended[tid]; ok {
		return nil, true, nil
	}
	return nil, false, fmt.Errorf("jsstore: table instance %d is not live", tid)
}

// publishJob is one table commit's messages and the blocks they carry.
type publishJob struct {
	t      *table
	msgs   []*nats.Msg
	blocks []store.TableCommit // what msgs[i] carries, encoded
	last   uint64              // the stream sequence of the last message, once acknowledged
}

// addPending records jobs' blocks by message id, for the followers
// (pendingBlock), and returns the ids for dropPending.
func (s *Store) addPending(jobs []publishJob) []string {
	var ids []string
	s.pendingMu.Lock()
	defer s.pendingMu.Unlock()
	for _, j := range jobs {
		for i, m := range j.msgs {
			id := m.Header.Get(jetstream.MsgIDHeader)
			s.pending[id] = &j.blocks[i]
			ids = append(ids, id)
		}
	}
	return ids
}

// dropPending forgets the blocks of ids.
func (s *Store) dropPending(ids []string) {
	s.pendingMu.Lock()
	defer s.pendingMu.Unlock()
	for _, id := range ids {
		delete(s.pending, id)
	}
}

// pendingBlock returns the block of this process's message id while its
// Append is in flight: what the message's body decodes to.
func (s *Store) pendingBlock(id string) (store.TableCommit, bool) {
	s.pendingMu.Lock()
	defer s.pendingMu.Unlock()
	if b, ok := s.pending[id]; ok {
		return *b, true
	}
	return store.TableCommit{}, false
}

// The kinds of message ids (NODE.KIND.TID.COMMIT.INDEX; a barrier's is
// NODE.b.TID.N): the follower holds this process's idAppend messages
// until Append releases them.
const (
	idAppend     = "a" // an Append's block
	idDictionary = "d" // purgeAged's series dictionary
	idBarrier    = "b" // Beyond's barrier (barrier.go): an empty block
)

// prepare splits tc into messages of at most s.maxMsg body bytes (the
// series first, then the fragments), each with its headers and a message
// id unique to this process, kind, table instance, commit and message.
func (s *Store) prepare(t *table, tc *store.TableCommit, kind string) (publishJob, error) {
	j := publishJob{t: t}
	if len(tc.NewSeries) == 0 && len(tc.Fragments) == 0 {
		return j, nil
	}
	base := s.node + "." + kind + "." + strconv.FormatUint(tc.TableID, 10) + "." + strconv.FormatUint(t.commits.Add(1), 10)
	subject := t.subject
	si, fi := 0, 0
	for si < len(tc.NewSeries) || fi < len(tc.Fragments) || len(j.msgs) == 0 {
		size := bodyFraming
		s0, f0 := si, fi
		for si < len(tc.NewSeries) {
			n := seriesBytes(&tc.NewSeries[si])
			if size+n > s.maxMsg && si > s0 {
				break
			}
			size += n
			si++
		}
		for fi < len(tc.Fragments) && si == len(tc.NewSeries) {
			n := fragmentBytes(&tc.Fragments[fi])
			if size+n > s.maxMsg && (fi > f0 || si > s0) {
				break
			}
			size += n
			fi++
		}
		if size > s.maxMsg {
			return j, fmt.Errorf("jsstore: a series or fragment of %d bytes exceeds the largest message (%d bytes)", size, s.maxMsg)
		}
		block := store.TableCommit{TableID: tc.TableID, Sync: tc.Sync, NewSeries: tc.NewSeries[s0:si],
			Fragments: tc.Fragments[f0:fi], CommitTime: tc.CommitTime}
		for _, w := range tc.Writes {
			if w > f0 && w < fi {
				block.Writes = append(block.Writes, w-f0)
			}
		}
		m := nats.NewMsg(subject)
		m.Header.Set(jetstream.MsgIDHeader, base+"."+strconv.Itoa(len(j.msgs)))
		m.Header.Set(hdrInstance, strconv.FormatUint(tc.TableID, 10))
		m.Header.Set(hdrSync, syncHeader(block.Sync))
		m.Header.Set(hdrCount, strconv.Itoa(len(block.Fragments)))
		m.Header.Set(hdrCommitTime, strconv.FormatInt(tc.CommitTime, 10))
		m.Header.Set(hdrEncoding, encodingCompact)
		m.Data = appendBody(make([]byte, 0, size), block.NewSeries, block.Writes, block.Fragments)
		j.msgs = append(j.msgs, m)
		j.blocks = append(j.blocks, block)
	}
	if len(j.msgs) > maxBatchMessages {
		return j, fmt.Errorf("jsstore: a commit of %d messages exceeds an atomic batch (%d): lower --feed-max-group-bytes", len(j.msgs), maxBatchMessages)
	}
	return j, nil
}

// bodyFraming bounds a message body's bytes besides its series and
// fragments (prepare's initial size: the counts).
const bodyFraming = 4 * binary.MaxVarintLen64

// maxNameBytes bounds a table, column or consumer name: the default
// backend's bound, so that what one backend takes the other does too.
// The row cache keeps no name; a name's room is in the table's record
// (limitsOf).
const maxNameBytes = 32_000

// limitsOf returns the store's limits for servers whose max_payload is
// maxPayload and block messages of at most maxMsg body bytes: the row
// cache's (rowengine.Limits), narrowed to what a message holds. A
// fragment travels in one message, and a block in an atomic batch of at
// most maxBatchMessages, each filled at least half by prepare; a table's
// record is one key-value entry of at most maxPayload bytes, which holds
// the schema and, besides it, the name twice (as bytes and in the
// metadata, each JSON-escaped to at most 6 bytes per byte), the stream's
// name, anchors and counters (recordRoom).
func limitsOf(maxPayload, maxMsg int) store.Limits {
	l := rowengine.Limits()
	l.MaxNameBytes = maxNameBytes
	recordRoom := 12*l.MaxNameBytes + 4096
	l.MaxFragmentBytes = min(l.MaxFragmentBytes, maxMsg-bodyFraming)
	l.MaxBlockBytes = min(l.MaxBlockBytes, maxBatchMessages/2*(maxMsg-bodyFraming))
	l.MaxMetaBytes = maxPayload - recordRoom
	return l
}

// Limits implements store.Backend (limitsOf, fixed at Open).
func (s *Store) Limits() store.Limits { return s.limits }

func seriesBytes(s *store.Series) int {
	return fragmentBytes(&store.Fragment{Fields: s.Tags})
}

// decodeMessage returns the block a message carries (decodeBody and the
// headers), checking that the header's count matches the body, and one
// more than the highest column position it uses. Its fragments are in
// scr's room (nil: their own), valid until scr decodes again.
func decodeMessage(h nats.Header, data []byte, scr *scratch) (store.TableCommit, int, error) {
	tc, count, err := decodeHeaders(h)
	if err != nil {
		return store.TableCommit{}, 0, err
	}
	b, err := decodeBody(data, h.Get(hdrEncoding), scr)
	if err != nil {
		return store.TableCommit{}, 0, err
	}
	if uint64(len(b.frags)) != count {
		return store.TableCommit{}, 0, fmt.Errorf("%w: %d fragments, header says %d", errCodec, len(b.frags), count)
	}
	tc.NewSeries, tc.Writes, tc.Fragments = b.series, b.writes, b.frags
	return tc, b.cols, nil
}

// decodeHeaders returns what a message's headers say of its block (the
// instance, sync and commit time, without series or fragments) and how
// many fragments it holds: all a follower of a table this node does not
// materialise reads (a consumer of headers only).
func decodeHeaders(h nats.Header) (store.TableCommit, uint64, error) {
	num := func(key string) (uint64, error) {
		v, err := strconv.ParseUint(h.Get(key), 10, 64)
		if err != nil {
			return 0, fmt.Errorf("%w: header %s: %v", errCodec, key, err)
		}
		return v, nil
	}
	tid, err1 := num(hdrInstance)
	sync, err2 := num(hdrSync)
	count, err3 := num(hdrCount)
	ct, err4 := strconv.ParseInt(h.Get(hdrCommitTime), 10, 64)
	if err := errors.Join(err1, err2, err3, err4); err != nil {
		return store.TableCommit{}, 0, err
	}
	return store.TableCommit{TableID: tid, Sync: sync == 1, CommitTime: ct}, count, nil
}

// publishAll publishes every job's messages, sets each job's last, and
// returns how many sends it took: the jobs go together, as one atomic
// batch of at most maxBatchMessages (one raft entry and one
// acknowledgement for the whole commit, whatever the tables it touches),
// in as few batches as whole jobs fit in, sent concurrently.
func (s *Store) publishAll(jobs []publishJob) (int, error) {
	var groups [][]*publishJob
	n := maxBatchMessages
	for i := range jobs {
		j := &jobs[i]
		if len(j.msgs) == 0 {
			continue
		}
		if n+len(j.msgs) > maxBatchMessages {
			groups, n = append(groups, nil), 0
		}
		groups[len(groups)-1] = append(groups[len(groups)-1], j)
		n += len(j.msgs)
	}
	if len(groups) == 1 {
		return 1, s.publish(groups[0])
	}
	var wg sync.WaitGroup
	errs := make([]error, len(groups))
	for i, g := range groups {
		wg.Go(func() { errs[i] = s.publish(g) })
	}
	wg.Wait()
	return len(groups), errors.Join(errs...)
}

// publish sends the messages of jobs (at most maxBatchMessages) until the
// stream acknowledges them or PublishTimeout passes, and sets each job's
// last to the stream sequence of its last message. A send without an
// acknowledgement is sent again with the same message ids: a message the
// stream stored meanwhile is a duplicate, which the stream acknowledges
// with its sequence; an atomic batch the stream stored is refused as a
// duplicate, and found by the tables' followers, which hold every message
// of this process they read (heldID).
func (s *Store) publish(jobs []*publishJob) error {
	var msgs []*nats.Msg
	for _, j := range jobs {
		msgs = append(msgs, j.msgs...)
	}
	deadline := time.Now().Add(s.cfg.PublishTimeout)
	wait := 50 * time.Millisecond
	for attempt := 0; ; attempt++ {
		if attempt > 0 {
			s.m.retries.Inc()
		}
		began := time.Now()
		seq, dup, err := s.send(msgs)
		if err == nil {
			s.succeeded()
			if dup {
				s.m.dedups.Inc()
			}
			s.m.publishes.Add(float64(len(msgs)))
			// An atomic batch is contiguous in the stream.
			seq -= uint64(len(msgs))
			for _, j := range jobs {
				seq += uint64(len(j.msgs))
				j.last = seq
			}
			return nil
		}
		if held(jobs) {
			s.succeeded()
			s.m.dedups.Inc()
			s.m.publishes.Add(float64(len(msgs)))
			return nil
		}
		s.failed(began)
		if time.Now().Add(wait).After(deadline) {
			return unavailable(fmt.Errorf("jsstore: publish to stream %s: %w", jobs[0].t.stream, err))
		}
		time.Sleep(wait)
		wait = min(2*wait, time.Second)
	}
}

// held tells whether every job's last message is one its table's
// follower holds (stored by an earlier send), and sets each job's last to
// its stream sequence when so.
func held(jobs []*publishJob) bool {
	seqs := make([]uint64, len(jobs))
	for i, j := range jobs {
		seq, ok := j.t.heldSeq(j.msgs[len(j.msgs)-1].Header.Get(jetstream.MsgIDHeader))
		if !ok {
			return false
		}
		seqs[i] = seq
	}
	for i, j := range jobs {
		j.last = seqs[i]
	}
	return true
}

// behindAfter is how long Append waits for its table's follower to apply
// an acknowledged block before it counts the stream as behind
// (ingestd_jetstream_stream_behind_total) and waits on.
const behindAfter = time.Second

// sendTimeout bounds one send's wait for its acknowledgement.
const sendTimeout = 5 * time.Second

// send publishes msgs: one message with js.PublishMsg, several as one
// atomic batch (ADR-50: Nats-Batch-Id, Nats-Batch-Sequence, the commit on
// the last). It returns the stream sequence of the last message and
// whether the stream found it a duplicate.
func (s *Store) send(msgs []*nats.Msg) (uint64, bool, error) {
	ctx, cancel := s.sendContext()
	defer cancel()
	if len(msgs) == 1 {
		ack, err := s.js.PublishMsg(ctx, msgs[0])
		if err != nil {
			return 0, false, err
		}
		return ack.Sequence, ack.Duplicate, nil
	}
	id := randomID()
	for i, m := range msgs {
		m.Header.Set("Nats-Batch-Id", id)
		m.Header.Set("Nats-Batch-Sequence", strconv.Itoa(i+1))
		if i < len(msgs)-1 {
			if err := s.nc.PublishMsg(m); err != nil {
				return 0, false, err
			}
		}
	}
	last := msgs[len(msgs)-1]
	last.Header.Set("Nats-Batch-Commit", "1")
	reply, err := s.nc.RequestMsgWithContext(ctx, last)
	if err != nil {
		return 0, false, err
	}
	var resp struct {
		jetstream.PubAck
		Error *jetstream.APIError `json:"error,omitempty"`
	}
	if err := json.Unmarshal(reply.Data, &resp); err != nil {
		return 0, false, fmt.Errorf("jsstore: batch acknowledgement: %w", err)
	}
	if resp.Error != nil {
		return 0, false, resp.Error
	}
	return resp.Sequence, resp.Duplicate, nil
}

// syncHeader is the Ingestd-Sync header of a block.
func syncHeader(sync bool) string {
	if sync {
		return "1"
	}
	return "0"
}
