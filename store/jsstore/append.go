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
)

// The headers of a block message (doc.go, "Block messages").
const (
	hdrInstance   = "Ingestd-Instance"    // the table instance id
	hdrFirstSeq   = "Ingestd-First-Seq"   // x_seq of the first fragment; 0: unsynced
	hdrCount      = "Ingestd-Count"       // fragments in the message
	hdrCommitTime = "Ingestd-Commit-Time" // Unix nanoseconds
)

// maxBatchMessages is JetStream's default bound of an atomic batch.
const maxBatchMessages = 1000

// Append implements store.Appender: it writes each commit's Meta (new
// columns, or a table created by the write: PutTable's update), assigns x_seq numbers above the table's last (extending
// the lease in the record when it runs out, before stamped), calls
// stamped, publishes every table's block concurrently (one message, or
// one atomic batch above the server's max_payload) with a message id and
// the expected last sequence, waits for every acknowledgement, then
// applies the blocks to the row cache and returns. Writer only.
func (s *Store) Append(ctx context.Context, commits []store.TableCommit, stamped func()) error {
	if err := s.enter(ctx); err != nil {
		return err
	}
	defer s.leave()
	tables := make([]*table, len(commits))
	for i := range commits {
		tc := &commits[i]
		var (
			t   *table
			err error
		)
		if tc.Meta != nil { // new columns, or a table created by this write
			m := *tc.Meta
			m.ID = tc.TableID
			_, t, err = s.putTable(m)
		} else {
			t, err = s.live(tc.TableID)
		}
		if err != nil {
			return err
		}
		tables[i] = t
		tc.FirstSeq = 0
		if tc.Sync && len(tc.Fragments) > 0 {
			tc.FirstSeq = t.xseq + 1
			s.raiseXSeq(t, t.xseq+uint64(len(tc.Fragments)))
		}
	}
	for _, t := range tables {
		if t.xseq > t.rec.Meta.Seq {
			// A lease is durable before any number under it is handed out.
			lease := t.xseq + seqLeaseChunk
			if err := s.update(t, func(r *record) { r.Meta.Seq = max(r.Meta.Seq, lease) }); err != nil {
				return err
			}
		}
	}
	if stamped != nil {
		stamped()
	}
	jobs := make([]publishJob, len(commits))
	for i := range commits {
		j, err := s.prepare(tables[i], &commits[i])
		if err != nil {
			return err
		}
		jobs[i] = j
	}
	var wg sync.WaitGroup
	errs := make([]error, len(jobs))
	for i := range jobs {
		if len(jobs[i].msgs) > 0 {
			wg.Go(func() { errs[i] = s.publish(&jobs[i]) })
		}
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return err
	}
	var applied []store.TableCommit
	for _, j := range jobs {
		applied = append(applied, j.blocks...)
		for i, b := range j.blocks { // the last message is at the table's last sequence
			j.t.ages.add(j.t.lastSeq-uint64(len(j.blocks)-1-i), b.Fragments)
		}
	}
	if len(applied) == 0 {
		return nil
	}
	return s.cache.ApplyAt(context.Background(), applied)
}

// enterLive is enter, then live: it admits a call on live instance tid.
// On nil the caller must call leave.
func (s *Store) enterLive(ctx context.Context, tid uint64) (*table, error) {
	if err := s.enter(ctx); err != nil {
		return nil, err
	}
	t, err := s.live(tid)
	if err != nil {
		s.leave()
		return nil, err
	}
	return t, nil
}

// live returns the state of live instance tid.
func (s *Store) live(tid uint64) (*table, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	t, ok := s.byTID[tid]
	if !ok {
		return nil, fmt.Errorf("jsstore: table instance %d is not live", tid)
	}
	return t, nil
}

// publishJob is one table commit's messages and the blocks they carry.
type publishJob struct {
	t      *table
	msgs   []*nats.Msg
	blocks []store.TableCommit // one per message, as the cache applies them
}

// prepare splits tc into messages of at most s.maxMsg body bytes (the
// series first, then the fragments), each with its headers and a message
// id unique to this process, table instance, commit and message.
func (s *Store) prepare(t *table, tc *store.TableCommit) (publishJob, error) {
	j := publishJob{t: t}
	if len(tc.NewSeries) == 0 && len(tc.Fragments) == 0 {
		return j, nil
	}
	t.commits++
	base := s.node + "." + strconv.FormatUint(tc.TableID, 10) + "." + strconv.FormatUint(t.commits, 10)
	subject := subjectOf(t.rec.Stream)
	si, fi := 0, 0
	for si < len(tc.NewSeries) || fi < len(tc.Fragments) || len(j.msgs) == 0 {
		size := 4 * binary.MaxVarintLen64
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
		if tc.FirstSeq != 0 && fi > f0 {
			block.FirstSeq = tc.FirstSeq + uint64(f0)
		}
		for _, w := range tc.Writes {
			if w > f0 && w < fi {
				block.Writes = append(block.Writes, w-f0)
			}
		}
		m := nats.NewMsg(subject)
		m.Header.Set(jetstream.MsgIDHeader, base+"."+strconv.Itoa(len(j.msgs)))
		m.Header.Set(hdrInstance, strconv.FormatUint(tc.TableID, 10))
		m.Header.Set(hdrFirstSeq, strconv.FormatUint(block.FirstSeq, 10))
		m.Header.Set(hdrCount, strconv.Itoa(len(block.Fragments)))
		m.Header.Set(hdrCommitTime, strconv.FormatInt(tc.CommitTime, 10))
		m.Data = appendBody(make([]byte, 0, size), block.NewSeries, block.Writes, block.Fragments)
		j.msgs = append(j.msgs, m)
		j.blocks = append(j.blocks, block)
	}
	if len(j.msgs) > maxBatchMessages {
		return j, fmt.Errorf("jsstore: a commit of %d messages exceeds an atomic batch (%d): lower --feed-max-group-bytes", len(j.msgs), maxBatchMessages)
	}
	return j, nil
}

func seriesBytes(s *store.Series) int {
	return fragmentBytes(&store.Fragment{Fields: s.Tags})
}

// decodeMessage returns the block a message carries (decodeBody and the
// headers), checking that the header's count matches the body.
func decodeMessage(h nats.Header, data []byte) (store.TableCommit, error) {
	num := func(key string) (uint64, error) {
		v, err := strconv.ParseUint(h.Get(key), 10, 64)
		if err != nil {
			return 0, fmt.Errorf("%w: header %s: %v", errCodec, key, err)
		}
		return v, nil
	}
	tid, err1 := num(hdrInstance)
	first, err2 := num(hdrFirstSeq)
	count, err3 := num(hdrCount)
	ct, err4 := strconv.ParseInt(h.Get(hdrCommitTime), 10, 64)
	if err := errors.Join(err1, err2, err3, err4); err != nil {
		return store.TableCommit{}, err
	}
	b, err := decodeBody(data)
	if err != nil {
		return store.TableCommit{}, err
	}
	if uint64(len(b.frags)) != count {
		return store.TableCommit{}, fmt.Errorf("%w: %d fragments, header says %d", errCodec, len(b.frags), count)
	}
	return store.TableCommit{TableID: tid, Sync: first != 0, FirstSeq: first, NewSeries: b.series, Writes: b.writes,
		Fragments: b.frags, CommitTime: ct}, nil
}

// publish sends j's messages with the expected last sequence the table's
// stream had, retrying until PublishTimeout. After a send that got no
// acknowledgement or a sequence mismatch it looks at the stream: the
// commit's last message id on top means it was stored (a lost
// acknowledgement: a dedup hit), the sequence unchanged means it was not
// (send again, same ids), a sequence below expected a stream not yet
// caught up with its own acknowledgements (wait and send again), one above
// it another writer (ErrConflict).
func (s *Store) publish(j *publishJob) error {
	t := j.t
	expected := t.lastSeq
	final := j.msgs[len(j.msgs)-1].Header.Get(jetstream.MsgIDHeader)
	deadline := time.Now().Add(s.cfg.PublishTimeout)
	wait := 50 * time.Millisecond
	for attempt := 0; ; attempt++ {
		if attempt > 0 {
			s.m.retries.Inc()
		}
		began := time.Now()
		seq, dup, err := s.send(j.msgs, expected)
		if err == nil {
			s.succeeded()
			if dup {
				s.m.dedups.Inc()
			}
			t.lastSeq = seq
			s.m.publishes.Add(float64(len(j.msgs)))
			return nil
		}
		stored, last, serr := s.settle(t, expected, final)
		switch {
		case serr == nil && stored:
			s.succeeded()
			s.m.dedups.Inc()
			t.lastSeq = last
			s.m.publishes.Add(float64(len(j.msgs)))
			return nil
		case serr == nil && last > expected:
			t.lastSeq = last
			return fmt.Errorf("%w: table %q, stream %s at %d, expected %d", ErrConflict, t.rec.Meta.Name, t.rec.Stream, last, expected)
		case serr == nil && last < expected:
			// Below what the stream acknowledged: a leader elected a moment
			// ago answers from a store still applying its log (the fault
			// tests' leader cut off and healed). Not another writer: wait
			// for it.
			s.m.behind.Inc()
			serr = fmt.Errorf("jsstore: stream %s at %d, below the %d it acknowledged", t.rec.Stream, last, expected)
		}
		s.failed(began)
		if time.Now().Add(wait).After(deadline) {
			return fmt.Errorf("jsstore: publish to stream %s: %w", t.rec.Stream, errors.Join(err, serr))
		}
		time.Sleep(wait)
		wait = min(2*wait, time.Second)
	}
}

// sendTimeout bounds one send's wait for its acknowledgement.
const sendTimeout = 5 * time.Second

// send publishes msgs expecting the stream's last sequence to be expected:
// one message with js.PublishMsg, several as one atomic batch (ADR-50:
// Nats-Batch-Id, Nats-Batch-Sequence, the commit on the last). It returns
// the stream sequence of the last message and whether the stream found it
// a duplicate.
func (s *Store) send(msgs []*nats.Msg, expected uint64) (uint64, bool, error) {
	ctx, cancel := s.sendContext()
	defer cancel()
	msgs[0].Header.Set(jetstream.ExpectedLastSeqHeader, strconv.FormatUint(expected, 10))
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

// settle reads t's stream after a failed send: stored tells whether its
// last message has id final, last is the stream's last sequence.
func (s *Store) settle(t *table, expected uint64, final string) (stored bool, last uint64, err error) {
	ctx, cancel := context.WithTimeout(context.Background(), sendTimeout)
	defer cancel()
	stream, err := s.js.Stream(ctx, t.rec.Stream)
	if err != nil {
		return false, 0, err
	}
	info := stream.CachedInfo()
	last = info.State.LastSeq
	if last == expected {
		return false, last, nil
	}
	msg, err := stream.GetMsg(ctx, last)
	if err != nil {
		return false, 0, err
	}
	if msg.Header.Get(jetstream.MsgIDHeader) == final {
		return true, last, nil
	}
	if tc, err := decodeMessage(msg.Header, msg.Data); err == nil && tc.FirstSeq != 0 {
		s.raiseXSeq(t, tc.FirstSeq+uint64(len(tc.Fragments))-1) // never below another writer's numbers
	}
	return false, last, nil
}
