package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/url"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// The overlapping-writers test's shape: every writer writes every point
// (table, host, time) of both tables once per pass, in its own random
// order, in requests of overlapLines data lines; the second pass resends
// the first pass's lines.
const (
	overlapWriters = 4
	overlapHosts   = 8
	overlapTimes   = 60
	overlapLines   = 120
)

var (
	overlapTables = []string{"ova", "ovb"}
	overlapFields = []string{"a", "b", "c", "s"} // s is a string, the others integers
)

// overlapPoint is one (table, host, time) the writers share.
type overlapPoint struct {
	table string
	host  string
	ts    int64
}

// overlapLine is one data line: a point and the fields it sets, each as
// the JSON text the drain must show for it.
type overlapLine struct {
	pt     overlapPoint
	fields map[string]string
}

// overlapRequest is one request of one writer: a begin marker, its data
// lines and an end marker in each table. A marker is a point of its own
// (host "mark", a time no other line uses) whose x_seq in the drain bounds
// the x_seqs the request's fragments got in that table.
type overlapRequest struct {
	id     int
	writer int
	lines  []overlapLine
}

// markerTS is the time of request id's begin (end false) or end marker.
func markerTS(id int, end bool) int64 {
	k := int64(2 * id)
	if end {
		k++
	}
	return baseTS - (k+1)*int64(time.Second)
}

func (r *overlapRequest) body() string {
	var b strings.Builder
	for _, tb := range overlapTables {
		fmt.Fprintf(&b, "%s,host=mark m=%di %d\n", tb, r.id, markerTS(r.id, false))
	}
	for _, l := range r.lines {
		fmt.Fprintf(&b, "%s,host=%s ", l.pt.table, l.pt.host)
		first := true
		for _, f := range append([]string{"w"}, overlapFields...) {
			v, ok := l.fields[f]
			if !ok {
				continue
			}
			if !first {
				b.WriteByte(',')
			}
			first = false
			if f == "s" {
				fmt.Fprintf(&b, "%s=%s", f, v) // v is a JSON string without escapes: ILP's quoting too
			} else {
				fmt.Fprintf(&b, "%s=%si", f, v)
			}
		}
		fmt.Fprintf(&b, " %d\n", l.pt.ts)
	}
	for _, tb := range overlapTables {
		fmt.Fprintf(&b, "%s,host=mark m=%di %d\n", tb, r.id, markerTS(r.id, true))
	}
	return b.String()
}

// overlapPlan builds every writer's requests for both passes. Each writer
// writes each point once per pass with field w (its number) and a random,
// non-empty subset of a, b, c and s, with values no other line uses.
func overlapPlan(seed uint64) [][]*overlapRequest {
	rng := rand.New(rand.NewPCG(seed, 7))
	var points []overlapPoint
	for _, tb := range overlapTables {
		for h := range overlapHosts {
			for k := range overlapTimes {
				points = append(points, overlapPoint{tb, "h" + strconv.Itoa(h), baseTS + int64(k)*int64(10*time.Second)})
			}
		}
	}
	plan := make([][]*overlapRequest, overlapWriters)
	id := 0
	var first [][]overlapLine // per writer, its first pass's lines in order
	for w := range overlapWriters {
		var lines []overlapLine
		for _, pi := range rng.Perm(len(points)) {
			mask := 1 + rng.IntN(1<<len(overlapFields)-1)
			fields := map[string]string{"w": strconv.Itoa(w)}
			for fi, f := range overlapFields {
				if mask&(1<<fi) == 0 {
					continue
				}
				v := (w+1)*1_000_000 + pi*10 + fi
				if f == "s" {
					fields[f] = strconv.Quote("v" + strconv.Itoa(v))
				} else {
					fields[f] = strconv.Itoa(v)
				}
			}
			lines = append(lines, overlapLine{points[pi], fields})
		}
		first = append(first, lines)
	}
	for range 2 { // the second pass resends the same lines
		for w := range overlapWriters {
			for lines := first[w]; len(lines) > 0; {
				n := min(overlapLines, len(lines))
				plan[w] = append(plan[w], &overlapRequest{id: id, writer: w, lines: lines[:n]})
				id++
				lines = lines[n:]
			}
		}
	}
	return plan
}

// overlapPost sends one request, again after a 503 (back-pressure:
// nothing was written), and requires 204.
func overlapPost(ctx context.Context, hc *http.Client, base, body string) error {
	for {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+"/write", strings.NewReader(body))
		if err != nil {
			return err
		}
		resp, err := hc.Do(req)
		if err != nil {
			return err
		}
		b, _ := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		switch resp.StatusCode {
		case http.StatusNoContent:
			return nil
		case http.StatusServiceUnavailable:
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(50 * time.Millisecond):
			}
		default:
			return fmt.Errorf("POST /write: %d %s", resp.StatusCode, clip(b))
		}
	}
}

// TestE2EOverlappingWriters has 4 concurrent HTTP writers write the same
// points of two sync tables, with different values and partly different
// field sets, in interleaved orders, then all of it again (a resend), and
// checks the drain of both tables row by row against docs/contract.md#coalescing: each
// fragment delivered once, under its own x_seq, as the coalesced row at
// its point, where the later write (in x_seq order) wins per column.
//
// Which write is later is the server's x_seq order, not the clients': the
// markers recover it. A request is one batch stamped in line order
// (docs/contract.md#arrival-order), so its begin and end markers bound the
// x_seqs of its fragments in each table; every drained fragment is thus
// traced to the one request that sent it, the fragments must be exactly
// the lines the writers sent, and each point's expected row is the
// column-wise fold of its requests' lines in x_seq order.
func TestE2EOverlappingWriters(t *testing.T) {
	d := startDaemon(t, testConfig(t.TempDir()))
	c := newClient(t, d)
	for _, tb := range overlapTables {
		c.createSyncTable(t, tb)
	}
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	plan := overlapPlan(seed)
	requests := map[int]*overlapRequest{}
	sent := 0
	for _, reqs := range plan {
		for _, r := range reqs {
			requests[r.id] = r
			sent += len(r.lines)
		}
	}
	require.Equal(t, 2*overlapWriters*len(overlapTables)*overlapHosts*overlapTimes, sent)

	// Each writer sends its requests in order, each after the answer to the
	// one before; the writers start together.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	tr := &http.Transport{MaxIdleConnsPerHost: overlapWriters, DisableCompression: true}
	defer tr.CloseIdleConnections()
	hc := &http.Client{Transport: tr, Timeout: 2 * time.Minute}
	errs := make([]error, overlapWriters)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for w, reqs := range plan {
		wg.Go(func() {
			<-start
			for _, r := range reqs {
				if err := overlapPost(ctx, hc, d.URL, r.body()); err != nil {
					errs[w] = fmt.Errorf("writer %d, request %d: %w", w, r.id, err)
					cancel()
					return
				}
			}
		})
	}
	close(start)
	wg.Wait()
	for _, err := range errs {
		require.NoError(t, err)
	}

	for _, tb := range overlapTables {
		want := uint64(sent/len(overlapTables) + 2*len(requests)) // data lines and markers
		st := c.syncStatus(t, tb)
		require.Equal(t, want, st.Seq, "table %s: one x_seq per line", tb)
		require.Equal(t, want, st.Watermark, "table %s: every acknowledged fragment visible", tb)
		checkOverlapTable(t, c, tb, requests)
	}
}

// overlapFragment is one drained data row: its x_seq and cells.
type overlapFragment struct {
	seq   uint64
	cells map[string]string
}

// checkOverlapTable drains table and checks every row against what the
// requests sent (see TestE2EOverlappingWriters).
func checkOverlapTable(t *testing.T, c *apiClient, table string, requests map[int]*overlapRequest) {
	t.Helper()
	cols := append([]string{"w"}, overlapFields...)
	begin, end := map[int]uint64{}, map[int]uint64{}
	byPoint := map[overlapPoint][]overlapFragment{}
	sum := drainAll(t, c, table, 700, url.Values{"time_format": {"ns"}}, func(names []string, row []json.RawMessage) {
		cells := map[string]string{}
		for i, n := range names {
			cells[n] = string(row[i])
		}
		seq, err := strconv.ParseUint(cells["x_seq"], 10, 64)
		require.NoError(t, err)
		ts, err := strconv.ParseInt(cells["time"], 10, 64)
		require.NoError(t, err, "time_format=ns: %s", cells["time"])
		host := jsonText(t, row[slices.Index(names, "host")])
		if host == "mark" {
			id, err := strconv.Atoi(cells["m"])
			require.NoError(t, err, "marker m: %s", cells["m"])
			require.Contains(t, requests, id, "marker of an unknown request")
			for _, f := range cols {
				require.Equal(t, "null", cells[f], "marker %d: only m is ever written at its point", id)
			}
			into := begin
			if ts == markerTS(id, true) {
				into = end
			} else {
				require.Equal(t, markerTS(id, false), ts, "marker %d's time", id)
			}
			require.NotContains(t, into, id, "marker %d (time %d) delivered twice", id, ts)
			into[id] = seq
			return
		}
		require.Equal(t, "null", cells["m"], "data row at x_seq %d: m is only written at markers", seq)
		pt := overlapPoint{table, host, ts}
		byPoint[pt] = append(byPoint[pt], overlapFragment{seq, cells})
	})

	// Every request's markers, in order, bounding disjoint ranges in the
	// order each writer was acknowledged.
	type span struct {
		id         int
		begin, end uint64
	}
	spans := make([]span, 0, len(requests))
	for id := range requests {
		require.Contains(t, begin, id, "table %s: begin marker of request %d", table, id)
		require.Contains(t, end, id, "table %s: end marker of request %d", table, id)
		require.Less(t, begin[id], end[id], "table %s: request %d's markers", table, id)
		spans = append(spans, span{id, begin[id], end[id]})
	}
	sort.Slice(spans, func(i, j int) bool { return spans[i].begin < spans[j].begin })
	lastEnd := map[int]uint64{} // per writer
	for i, s := range spans {
		if i > 0 {
			require.Less(t, spans[i-1].end, s.begin, "table %s: requests %d and %d stamped interleaved", table, spans[i-1].id, s.id)
		}
		w := requests[s.id].writer
		require.Less(t, lastEnd[w], s.begin, "table %s: writer %d's request %d stamped before its earlier one", table, w, s.id)
		lastEnd[w] = s.end
	}
	owner := func(seq uint64) *overlapRequest {
		i := sort.Search(len(spans), func(i int) bool { return spans[i].end > seq })
		if i == len(spans) || spans[i].begin > seq {
			return nil
		}
		return requests[spans[i].id]
	}

	// What each request sent at each point of this table.
	sentAt := map[overlapPoint]map[int]map[string]string{}
	lines := 0
	for _, r := range requests {
		for _, l := range r.lines {
			if l.pt.table != table {
				continue
			}
			if sentAt[l.pt] == nil {
				sentAt[l.pt] = map[int]map[string]string{}
			}
			sentAt[l.pt][r.id] = l.fields
			lines++
		}
	}
	require.Equal(t, lines+2*len(requests), sum.Rows, "table %s: one row per fragment", table)
	require.Len(t, byPoint, len(sentAt), "table %s: points", table)

	for pt, frags := range byPoint {
		sentHere := sentAt[pt]
		require.Len(t, frags, len(sentHere), "table %s point %v: one fragment per line sent there", table, pt)
		// Fold the lines in x_seq order (the drain delivers them so).
		want := map[string]string{}
		for _, f := range cols {
			want[f] = "null"
		}
		seen := map[int]bool{}
		for _, fr := range frags {
			r := owner(fr.seq)
			require.NotNil(t, r, "table %s point %v: x_seq %d within no request's markers", table, pt, fr.seq)
			fields, ok := sentHere[r.id]
			require.True(t, ok, "table %s point %v: x_seq %d traced to request %d, which sent no line there", table, pt, fr.seq, r.id)
			require.False(t, seen[r.id], "table %s point %v: two fragments of request %d", table, pt, r.id)
			seen[r.id] = true
			for f, v := range fields {
				want[f] = v
			}
		}
		// Every fragment shows the coalesced row, under its own x_seq.
		for _, fr := range frags {
			for _, f := range cols {
				require.Equal(t, want[f], fr.cells[f], "table %s point %v, fragment x_seq %d: column %s (fragments %v)", table, pt, fr.seq, f, frags)
			}
		}
	}
}
