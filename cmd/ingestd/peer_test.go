package main

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// The public parser test suites of three peers (see
// the file's "format" key; the file is in testDataDir).
const (
	peerCasesFile  = "peer_cases.json"
	peerCasesCount = 7_099
	// peerRoundCases is how many cases rejected from their first line
	// run before one look at the tables.
	peerRoundCases = 250
)

// peerCasesPath is the peers' cases file (in testDataDir).
func peerCasesPath() string { return filepath.Join(testDataDir(), peerCasesFile) }

// peerCase is one asserted parse of a peer's test suite.
type peerCase struct {
	ID         string              `json:"id"`
	Source     string              `json:"source"`
	Test       string              `json:"test"`
	Precision  string              `json:"precision"`
	Input      *string             `json:"input"`
	InputB64   string              `json:"input_b64"`
	InputParts [][]json.RawMessage `json:"input_parts"`
	Expect     string              `json:"expect"` // accept, partial or reject
	Points     []peerPoint         `json:"points"`
	BadLine    int                 `json:"peer_bad_line"` // 0: not known
	PeerError  string              `json:"peer_error"`
}

// peerPoint is a point the peer stores.
type peerPoint struct {
	Measurement string              `json:"measurement"`
	Tags        map[string]string   `json:"tags"`
	Fields      [][]json.RawMessage `json:"fields"` // [key, type, value]
	Time        *json.Number        `json:"time"`   // nil: the receive time, truncated to the precision
	// TimeOrReceive: Time is also the peer's default time, so the line
	// may have had no timestamp.
	TimeOrReceive bool `json:"time_or_receive"`
}

// body is the request body the case sends.
func (c *peerCase) body(t testing.TB) []byte {
	t.Helper()
	switch {
	case c.Input != nil:
		return []byte(*c.Input)
	case c.InputB64 != "":
		b, err := base64.StdEncoding.DecodeString(c.InputB64)
		require.NoError(t, err, "case %s: input_b64", c.ID)
		return b
	}
	require.NotEmpty(t, c.InputParts, "case %s has no input", c.ID)
	var b bytes.Buffer
	for _, p := range c.InputParts {
		require.Len(t, p, 2, "case %s: input_parts holds [text, count] pairs", c.ID)
		var s string
		var n int
		require.NoError(t, json.Unmarshal(p[0], &s), "case %s", c.ID)
		require.NoError(t, json.Unmarshal(p[1], &n), "case %s", c.ID)
		b.WriteString(strings.Repeat(s, n))
	}
	return b.Bytes()
}

// loadPeerCases reads the data file. It skips the test when the file is
// absent, except on CI (CI=true) where it fails.
func loadPeerCases(t testing.TB) []peerCase {
	t.Helper()
	path := peerCasesPath()
	raw, err := os.ReadFile(path)
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("peer cases file %s is required on CI (CI=true): %v", path, err)
		}
		t.Skipf("peer cases file %s not found (%v): set %s to the test data directory", path, err, testDataEnv)
	}
	var file struct {
		Cases []peerCase `json:"cases"`
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	require.NoError(t, dec.Decode(&file), "%s", path)
	require.Len(t, file.Cases, peerCasesCount, "%s", path)
	seen := map[string]bool{}
	for _, c := range file.Cases {
		require.False(t, seen[c.ID], "case id %s is not unique", c.ID)
		seen[c.ID] = true
		require.Contains(t, []string{"accept", "partial", "reject"}, c.Expect, "case %s", c.ID)
	}
	return file.Cases
}

// peerPrecisions are the /write precisions in nanoseconds ("" is absent:
// nanoseconds).
var peerPrecisions = map[string]int64{
	"": 1, "n": 1, "ns": 1, "u": 1e3, "us": 1e3, "ms": 1e6, "s": 1e9, "m": 60e9, "h": 3600e9,
}

// Why ingestd answers a peer case differently (docs/guide.md#conformance-with-the-peers-parser-tests lists them).
const (
	peerReasonHugeName = "a name is at most --max-name-bytes (default 4096) long, so that every key fits the store: " +
		"the 65,526-byte measurement InfluxDB accepts is refused with 400"
	peerReasonNUL       = "NUL is not white space: line-protocol v2 rejects it and no name holds a control character; InfluxDB 1.x skips NUL bytes"
	peerReasonNegZero   = "-0 is stored as -0 (strconv.ParseFloat, which every peer parses with, keeps the sign); the case's JSON holds 0"
	peerReasonTimeKey   = "`time` is a reserved key: it names the time column"
	peerReasonBlankTabs = "a line of only spaces and tabs is blank, as InfluxDB 1.x skips it; line-protocol v2 rejects the tab"
	peerReasonComment   = "a `#` line is skipped up to its newline whatever it holds, as InfluxDB 1.x skips it; " +
		"line-protocol v2 rejects control characters and a lone \\r in a comment"
	peerReasonMinTime   = "timestamps are bounded to ±9223372036854775806 ns (InfluxDB 1.x's range); line-protocol v2 accepts math.MinInt64"
	peerReasonBackslash = "ingestd decodes with line-protocol v2, where `\\\\` is no escape in a measurement, so `cpu\\\\ value=42` " +
		"is the measurement `cpu\\ value=42` without fields; Telegraf's parser ends the name at the space"
)

// peerDisagreements are the cases ingestd answers differently from the peer,
// by case id, each with its reason.
var peerDisagreements = map[string]string{
	"influxdb1/191 TestNewPointsRejectsMaxKey (max key)": peerReasonHugeName,

	"influxdb1/186 TestParsePointsStringWithExtraBuffer": peerReasonNUL,

	"lp-corpus-decode/16f42a27b1032ab9ffa616e9de6edf2f": peerReasonNegZero,
	"lp-corpus-decode/579631bbe7f2e5bdbd98a380d381dd0c": peerReasonNegZero,

	"lp-corpus-decode/2a6fa6f9c4bd199a093f88e94b542430": peerReasonTimeKey,
	"lp-corpus-decode/5f10c11304f37e8f65e1d9fc36c6fde3": peerReasonTimeKey,

	"lp-corpus-decode/a02aab4c616a523b89c419dc100e70fd": peerReasonBlankTabs,
	"lp-corpus-decode/c0ce359f018a4255f4152ca2bc156ca7": peerReasonBlankTabs,

	"lp-corpus-decode/dfa6432a639651d02910c4527badb15c": peerReasonComment,
	"lp-decoder/carriage-return-in-comment":             peerReasonComment,

	"lp-decoder/negative-timestamp-just-in-range": peerReasonMinTime,

	"telegraf/050 TestMachine/measurement escaped trailing backslash": peerReasonBackslash,
}

// TestPeerCases sends every case of the peers' parser test suites to /write
// of a real daemon and compares what it answers and what the drain then
// holds with what the peer expects: accept (204, exactly the peer's points
// stored), partial (400 naming the peer's first bad line, exactly the
// peer's points stored) or reject (400 naming the peer's first bad line
// when the peer names one). Cases run one after the other; each drops the
// tables it created, so the next finds none. Every disagreement must be in
// peerDisagreements, and every entry there must still disagree.
func TestPeerCases(t *testing.T) {
	cases := loadPeerCases(t)
	cfg := testConfig(t.TempDir())
	cfg.ilp.TCPAddr = ""
	// The parser is under test, not durability; and every DROP flushes
	// badger's memtable and allocates a new one, which the minimum size
	// keeps cheap.
	cfg.store.UnsafeNoSync = true
	cfg.store.MemTableBytes = 1 << 20
	// Every table a write creates starts WITH SYNC, whatever its name
	// (path.Match's * does not match a slash).
	cfg.feed.SyncTables = []string{"*"}
	for range 16 {
		cfg.feed.SyncTables = append(cfg.feed.SyncTables, cfg.feed.SyncTables[len(cfg.feed.SyncTables)-1]+"/*")
	}
	h := &peerHarness{cfg: cfg}
	h.start(t)

	begin := time.Now()
	got := map[string]string{} // case id → how ingestd disagrees
	type tally struct{ run, agree int }
	bySource := map[string]*tally{}
	verdicts := make([]string, len(cases))
	var round []*peerCase
	var at []int
	flush := func() {
		for k, v := range h.runRejects(t, round) {
			verdicts[at[k]] = v
		}
		round, at = round[:0], at[:0]
	}
	for i := range cases {
		pc := &cases[i]
		if pc.Expect != "reject" || pc.BadLine != 1 {
			verdicts[i] = h.run(t, pc)
			continue
		}
		round, at = append(round, pc), append(at, i)
		if len(round) == peerRoundCases {
			flush()
		}
	}
	flush()
	for i := range cases {
		pc := &cases[i]
		if bySource[pc.Source] == nil {
			bySource[pc.Source] = &tally{}
		}
		bySource[pc.Source].run++
		if verdicts[i] != "" {
			got[pc.ID] = verdicts[i]
		} else {
			bySource[pc.Source].agree++
		}
	}
	for _, src := range slices.Sorted(maps.Keys(bySource)) {
		n := bySource[src]
		t.Logf("%s: %d cases, %d agree, %d disagree", src, n.run, n.agree, n.run-n.agree)
	}
	byReason := map[string]int{}
	for id := range got {
		if r, ok := peerDisagreements[id]; ok {
			byReason[r]++
		}
	}
	for _, r := range slices.Sorted(maps.Keys(byReason)) {
		t.Logf("known disagreement (%d): %s", byReason[r], r)
	}
	t.Logf("%d cases in %s", len(cases), time.Since(begin).Round(time.Millisecond))

	for _, id := range slices.Sorted(maps.Keys(got)) {
		if _, ok := peerDisagreements[id]; !ok {
			pc := cases[slices.IndexFunc(cases, func(c peerCase) bool { return c.ID == id })]
			t.Errorf("case %s (%s, precision %q): %s\n\tinput: %q", id, pc.Test, pc.Precision, got[id], clip(pc.body(t)))
		}
	}
	for _, id := range slices.Sorted(maps.Keys(peerDisagreements)) {
		if _, ok := got[id]; !ok {
			t.Errorf("case %s now agrees with the peer: remove it from peerDisagreements and docs/guide.md (%s)", id, peerDisagreements[id])
		}
	}
}

// peerHarness is the daemon the cases run against. A case that stops it
// (a disagreement of its own) gets a fresh one for the cases after it.
type peerHarness struct {
	cfg config
	d   *daemon
	c   *apiClient
}

func (h *peerHarness) start(t testing.TB) {
	t.Helper()
	h.cfg.store.Dir = t.TempDir()
	h.d = startDaemon(t, h.cfg)
	h.c = newClient(t, h.d)
}

// stopped reports how the daemon stopped when it stops within a few
// seconds (it then starts a fresh one), else "".
func (h *peerHarness) stopped(t testing.TB) string {
	t.Helper()
	select {
	case err := <-h.d.done:
		h.d.done = nil // stopped: nothing left for the cleanup to stop
		h.c.hc.CloseIdleConnections()
		h.start(t)
		return fmt.Sprintf("; the daemon stopped: %.300v", err)
	case <-time.After(5 * time.Second):
		return ""
	}
}

// peerAnswer is how the daemon answered one case's write.
type peerAnswer struct {
	status        int
	line          int // the first bad line of a 400
	body          []byte
	before, after int64 // the request's time window (Unix ns)
	failure       string
}

// send writes one case. An answer other than 204 or 400 is a failure (and
// the daemon is replaced when it stopped).
func (h *peerHarness) send(t testing.TB, pc *peerCase) peerAnswer {
	t.Helper()
	path := "/write?db=peer"
	if pc.Precision != "" {
		path += "&precision=" + url.QueryEscape(pc.Precision)
	}
	a := peerAnswer{before: time.Now().UnixNano()}
	r := h.c.write(t, path, http.Header{"Content-Type": {"text/plain; charset=utf-8"}}, bytes.NewReader(pc.body(t)))
	a.after = time.Now().UnixNano()
	a.status, a.body = r.Status, r.Body
	switch r.Status {
	case http.StatusNoContent:
	case http.StatusBadRequest:
		a.line = decodeError(t, r, http.StatusBadRequest).Line
	default:
		a.failure = fmt.Sprintf("POST /write answered %d: %s%s", r.Status, clip(r.Body), h.stopped(t))
	}
	return a
}

// run sends one case and returns how ingestd's answer differs from the
// peer's ("" when it agrees). It leaves no table behind.
func (h *peerHarness) run(t testing.TB, pc *peerCase) string {
	t.Helper()
	a := h.send(t, pc)
	if a.failure != "" {
		return a.failure
	}
	return peerVerdict(t, pc, a, drainAndDropAll(t, h.c))
}

// runRejects runs cases the peer rejects from their first line, which
// store nothing when ingestd agrees: one write each, then one look at the
// tables. When a table is there, or a write failed, every case of the
// round runs again on its own (a case may then have met another's schema).
func (h *peerHarness) runRejects(t testing.TB, cases []*peerCase) []string {
	t.Helper()
	out := make([]string, len(cases))
	for i, pc := range cases {
		a := h.send(t, pc)
		if a.failure != "" {
			return h.runEach(t, cases)
		}
		out[i] = peerVerdict(t, pc, a, nil)
	}
	if len(listTables(t, h.c)) > 0 {
		drainAndDropAll(t, h.c)
		return h.runEach(t, cases)
	}
	return out
}

func (h *peerHarness) runEach(t testing.TB, cases []*peerCase) []string {
	t.Helper()
	out := make([]string, len(cases))
	for i, pc := range cases {
		out[i] = h.run(t, pc)
	}
	return out
}

// peerVerdict compares an answer and the points it stored with the peer's
// expectation: "" when they agree, else how they differ.
func peerVerdict(t testing.TB, pc *peerCase, a peerAnswer, stored []peerRow) string {
	t.Helper()
	prec, ok := peerPrecisions[pc.Precision]
	require.True(t, ok, "case %s: unknown precision %q", pc.ID, pc.Precision)
	var diffs []string
	switch {
	case pc.Expect == "accept" && a.status != http.StatusNoContent:
		diffs = append(diffs, fmt.Sprintf("rejected line %d (%s), the peer accepts every line", a.line, clip(a.body)))
	case pc.Expect != "accept" && a.status == http.StatusNoContent:
		diffs = append(diffs, fmt.Sprintf("accepted every line, the peer rejects line %d (%s)", pc.BadLine, pc.PeerError))
	case pc.Expect != "accept" && pc.BadLine > 0 && a.line != pc.BadLine:
		diffs = append(diffs, fmt.Sprintf("first bad line %d (%s), the peer's is %d (%s)", a.line, clip(a.body), pc.BadLine, pc.PeerError))
	}
	if pc.Expect != "reject" {
		if d := comparePeerPoints(t, pc, stored, prec, a.before, a.after); d != "" {
			diffs = append(diffs, d)
		}
	}
	return strings.Join(diffs, "; ")
}

// peerRow is one point as the drain shows it, rendered for comparison.
type peerRow struct {
	key    string // measurement, tags and time token
	fields string // sorted "key:type=value" list
}

// drainAndDropAll drains every table to its end, drops it and returns
// every drained fragment (each shows the coalesced row at its point).
func drainAndDropAll(t testing.TB, c *apiClient) []peerRow {
	t.Helper()
	var rows []peerRow
	for _, tb := range listTables(t, c) {
		require.True(t, tb.Sync.Enabled, "table %q was created with sync OFF: --sync-tables misses its name", tb.Name)
		tp := "/api/v1/tables/" + url.PathEscape(tb.Name)
		r := c.get(t, tp)
		require.Equal(t, http.StatusOK, r.Status, "GET %s: %s", tp, r.Body)
		var schema struct {
			Columns []struct {
				Name string `json:"name"`
				Type string `json:"type"`
			} `json:"columns"`
		}
		require.NoError(t, json.Unmarshal(r.Body, &schema))
		types := map[string]string{}
		for _, col := range schema.Columns {
			types[col.Name] = col.Type
		}
		drainAll(t, c, tb.Name, 10_000, url.Values{"time_format": {"ns"}}, func(cols []string, row []json.RawMessage) {
			rows = append(rows, peerDrainedRow(t, tb.Name, types, cols, row))
		})
		r = c.do(t, http.MethodDelete, tp, nil, nil)
		require.Equal(t, http.StatusNoContent, r.Status, "DELETE %s: %s", tp, r.Body)
	}
	return rows
}

// tableEntry is one table of GET /api/v1/tables.
type tableEntry struct {
	Name      string     `json:"name"`
	Sync      syncState  `json:"sync"`
	Retention string     `json:"retention"`
	Stats     tableStats `json:"stats"`
}

// listTables returns GET /api/v1/tables.
func listTables(t testing.TB, c *apiClient) []tableEntry {
	t.Helper()
	r := c.get(t, "/api/v1/tables")
	require.Equal(t, http.StatusOK, r.Status, "GET /api/v1/tables: %s", r.Body)
	var list struct {
		Tables []tableEntry `json:"tables"`
	}
	decodeStrict(t, r.Body, &list)
	return list.Tables
}

// peerDrainedRow renders one drained row; its key holds the time as the
// integer nanoseconds for now (peerTimeToken rewrites it).
func peerDrainedRow(t testing.TB, table string, types map[string]string, cols []string, row []json.RawMessage) peerRow {
	t.Helper()
	var ts string
	tags := map[string]string{}
	var fields []string
	for i, col := range cols {
		cell := row[i]
		if col == "x_seq" || col == "x_op" || string(cell) == "null" {
			continue
		}
		switch typ := types[col]; typ {
		case "time":
			ts = string(cell)
		case "tag":
			tags[col] = jsonText(t, cell)
		default:
			fields = append(fields, peerField(t, col, typ, cell))
		}
	}
	slices.Sort(fields)
	return peerRow{key: peerKey(table, tags, ts), fields: strings.Join(fields, " ")}
}

// peerKey renders a point's measurement, tags and time token.
func peerKey(m string, tags map[string]string, ts string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%q", m)
	for _, k := range slices.Sorted(maps.Keys(tags)) {
		fmt.Fprintf(&b, ",%q=%q", k, tags[k])
	}
	return b.String() + " @" + ts
}

// peerField renders a field value of JSON text v canonically:
// key:type=value, numbers parsed (so 1.0 and 1 are one float).
func peerField(t testing.TB, key, typ string, v json.RawMessage) string {
	t.Helper()
	var s string
	var err error
	switch typ {
	case "float":
		var f float64
		f, err = strconv.ParseFloat(string(v), 64)
		s = strconv.FormatFloat(f, 'g', -1, 64)
	case "integer":
		var n int64
		n, err = strconv.ParseInt(string(v), 10, 64)
		s = strconv.FormatInt(n, 10)
	case "unsigned":
		var n uint64
		n, err = strconv.ParseUint(string(v), 10, 64)
		s = strconv.FormatUint(n, 10)
	case "boolean":
		var b bool
		err = json.Unmarshal(v, &b)
		s = strconv.FormatBool(b)
	case "string":
		err = json.Unmarshal(v, &s)
		s = strconv.Quote(s)
	default:
		require.Failf(t, "unknown field type", "field %q: type %q", key, typ)
	}
	require.NoError(t, err, "field %q of type %s: %s", key, typ, v)
	return fmt.Sprintf("%q:%s=%s", key, typ, s)
}

// comparePeerPoints compares what the drain holds with the peer's points,
// both coalesced by point (measurement, tags, time: InfluxDB's overwrite
// rule, which the drain applies to every fragment it shows) and counted in
// fragments. A line without a timestamp must have the receive time
// truncated to the precision: a time within the request, a multiple of the
// precision.
func comparePeerPoints(t testing.TB, pc *peerCase, stored []peerRow, prec, before, after int64) string {
	t.Helper()
	recvLo := before - before%prec
	token := func(key string) string {
		m, ts, _ := strings.Cut(key, " @")
		n, err := strconv.ParseInt(ts, 10, 64)
		require.NoError(t, err, "drained time %q", ts)
		switch {
		case n < recvLo || n > after:
			return key
		case n%prec != 0:
			return m + " @receive time not truncated to the precision"
		}
		return m + " @receive"
	}
	gotRows := map[string]string{}
	gotCount := map[string]int{}
	for _, r := range stored {
		k := token(r.key)
		if f, ok := gotRows[k]; ok && f != r.fields {
			return fmt.Sprintf("the drain shows two rows at one point %s: %s and %s", k, f, r.fields)
		}
		gotRows[k] = r.fields
		gotCount[k]++
	}

	wantFields := map[string]map[string]string{}
	wantCount := map[string]int{}
	for _, p := range pc.Points {
		ts := "receive"
		if p.Time != nil {
			ts = p.Time.String()
		}
		k := peerKey(p.Measurement, p.Tags, ts)
		if _, ok := gotRows[k]; !ok && p.TimeOrReceive {
			k = peerKey(p.Measurement, p.Tags, "receive")
		}
		if wantFields[k] == nil {
			wantFields[k] = map[string]string{}
		}
		for _, f := range p.Fields {
			require.Len(t, f, 3, "case %s: a field is [key, type, value]", pc.ID)
			var key, typ string
			require.NoError(t, json.Unmarshal(f[0], &key))
			require.NoError(t, json.Unmarshal(f[1], &typ))
			wantFields[k][key] = peerField(t, key, typ, f[2])
		}
		wantCount[k]++
	}
	wantRows := map[string]string{}
	for k, fs := range wantFields {
		wantRows[k] = strings.Join(slices.Sorted(maps.Values(fs)), " ")
	}
	if maps.Equal(gotRows, wantRows) && maps.Equal(gotCount, wantCount) {
		return ""
	}
	var b strings.Builder
	b.WriteString("stored points differ:")
	for _, k := range slices.Sorted(maps.Keys(wantRows)) {
		if gotRows[k] != wantRows[k] || gotCount[k] != wantCount[k] {
			fmt.Fprintf(&b, "\n\t\twant %s %s (%d fragments)", k, wantRows[k], wantCount[k])
			if _, ok := gotRows[k]; ok {
				fmt.Fprintf(&b, "\n\t\t got %s %s (%d fragments)", k, gotRows[k], gotCount[k])
			}
		}
	}
	for _, k := range slices.Sorted(maps.Keys(gotRows)) {
		if _, ok := wantRows[k]; !ok {
			fmt.Fprintf(&b, "\n\t\t got %s %s (%d fragments), not a peer point", k, gotRows[k], gotCount[k])
		}
	}
	return b.String()
}
