package httpapi

import (
	"context"
	"errors"
	"math"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/ingestd/ingestd/feed"
	"github.com/ingestd/ingestd/httpapi/auth"
	"github.com/ingestd/ingestd/httpapi/wire"
)

// Drain output formats (docs/contract.md#formats).
const (
	formatJSON   = "json"
	formatNDJSON = "ndjson"
	formatLP     = "lp"
	// formatCSV is InfluxDB /query's CSV, for SQL results asked for with
	// Accept: text/csv.
	formatCSV = "csv"
)

// maxWait caps the long-poll wait (docs/contract.md#long-poll).
const maxWait = 60 * time.Second

// drainParams parses the drain query. It writes the 400 itself and reports
// false on a bad parameter.
func drainParams(w http.ResponseWriter, r *http.Request) (feed.DrainRequest, string, timeFormat, bool) {
	q := r.URL.Query()
	req := feed.DrainRequest{Table: q.Get("table")}
	if req.Table == "" {
		writeClientErr(w, wire.CodeInvalidParameter, "table is required")
		return req, "", 0, false
	}
	ls := q.Get("limit")
	if ls == "" {
		writeClientErr(w, wire.CodeLimitRequired, "limit is required: the feed pages, it does not stream unbounded")
		return req, "", 0, false
	}
	var err error
	if req.Limit, err = strconv.Atoi(ls); err != nil {
		writeClientErr(w, wire.CodeInvalidLimit, "limit must be an integer, got "+feed.QuoteInput(ls))
		return req, "", 0, false
	}
	for _, p := range []struct {
		name string
		dst  *uint64
		set  *bool
	}{{"after", &req.After, nil}, {"epoch", &req.Epoch, &req.HasEpoch}} {
		s := q.Get(p.name)
		if s == "" {
			continue
		}
		if *p.dst, err = strconv.ParseUint(s, 10, 64); err != nil {
			writeClientErr(w, wire.CodeInvalidParameter, p.name+" must be a non-negative integer, got "+feed.QuoteInput(s))
			return req, "", 0, false
		}
		if p.set != nil {
			*p.set = true
		}
	}
	if s := q.Get("columns"); s != "" {
		req.Columns = strings.Split(s, ",")
	}
	if s := q.Get("wait"); s != "" {
		d, err := time.ParseDuration(s)
		if err != nil || d < 0 || d > maxWait {
			writeClientErr(w, wire.CodeInvalidParameter, "wait must be a duration from 0s to 60s (e.g. 5s), got "+feed.QuoteInput(s))
			return req, "", 0, false
		}
		req.Wait = d
	}
	req.Consumer = q.Get("consumer")
	if !filterParams(w, q, &req) {
		return req, "", 0, false
	}
	format := q.Get("format")
	switch format {
	case "":
		format = formatJSON
	case formatJSON, formatNDJSON, formatLP:
	default:
		writeClientErr(w, wire.CodeInvalidParameter, "format must be json, ndjson or lp, got "+feed.QuoteInput(format))
		return req, "", 0, false
	}
	tf, ok := parseTimeFormat(q.Get("time_format"))
	if !ok {
		writeClientErr(w, wire.CodeInvalidParameter, "time_format must be one of rfc3339, ns, us, ms, s, got "+feed.QuoteInput(q.Get("time_format")))
		return req, "", 0, false
	}
	return req, format, tf, true
}

// Filter parameters of a drain (docs/contract.md#filters).
const (
	// tagParamPrefix starts a tag condition's parameter: tag.<key>=<value>.
	tagParamPrefix = "tag."
	// inPrefix starts a value listing several (IN): in:v1,v2.
	inPrefix = "in:"
	// eqPrefix starts a value taken as it is (a value holding "in:").
	eqPrefix = "eq:"
)

// filterParams parses a drain's operation and filters into req: operation,
// tag.<key>=<value> (in:v1,v2 for any of the values; eq:v for a value
// taken as it is), has=f1,f2 (in lists a backslash escapes a comma or a
// backslash), start and end (in precision units, or RFC 3339). Names are checked against the table, and the
// budgets enforced, by the feed. It writes the 400 itself and reports
// false on a bad parameter.
func filterParams(w http.ResponseWriter, q url.Values, req *feed.DrainRequest) bool {
	switch op := q.Get("operation"); op {
	case "":
	case "insert":
		req.Operation = feed.OpInsert
	case "update":
		req.Operation = feed.OpUpdate
	default:
		writeClientErr(w, wire.CodeInvalidFilter, "operation must be insert or update, got "+feed.QuoteInput(op))
		return false
	}
	keys := make([]string, 0, len(q))
	for k := range q {
		if strings.HasPrefix(k, tagParamPrefix) {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	for _, k := range keys {
		tf := feed.TagFilter{Key: k[len(tagParamPrefix):]}
		if tf.Key == "" {
			writeClientErr(w, wire.CodeInvalidFilter, "a tag filter names no tag: tag.<key>=<value>")
			return false
		}
		switch v := q.Get(k); {
		case strings.HasPrefix(v, inPrefix):
			tf.Values = splitEscaped(v[len(inPrefix):])
		case strings.HasPrefix(v, eqPrefix):
			tf.Values = []string{v[len(eqPrefix):]}
		default:
			tf.Values = []string{v}
		}
		req.Filter.Tags = append(req.Filter.Tags, tf)
	}
	if h := q.Get("has"); h != "" {
		req.Filter.Has = splitEscaped(h)
		if slices.Contains(req.Filter.Has, "") {
			writeClientErr(w, wire.CodeInvalidFilter, "has lists an empty field name: has=<field>[,<field>…]")
			return false
		}
	}
	unit, ok := parsePrecision(q.Get("precision"))
	if !ok {
		writeClientErr(w, wire.CodeInvalidFilter, "precision must be one of ns, us, ms, s, got "+feed.QuoteInput(q.Get("precision")))
		return false
	}
	for _, b := range []struct {
		name string
		dst  *int64
		set  *bool
	}{{"start", &req.Filter.Start, &req.Filter.HasStart}, {"end", &req.Filter.End, &req.Filter.HasEnd}} {
		v := q.Get(b.name)
		if v == "" {
			continue
		}
		ns, ok := parseFilterTime(v, unit)
		if !ok {
			writeClientErr(w, wire.CodeInvalidFilter, b.name+" must be an integer in precision units or an RFC 3339 time, got "+feed.QuoteInput(v))
			return false
		}
		*b.dst, *b.set = ns, true
	}
	return true
}

// splitEscaped splits s at the commas not escaped by a backslash; a
// backslash before a comma or a backslash stands for it.
func splitEscaped(s string) []string {
	var out []string
	var cur strings.Builder
	for i := 0; i < len(s); i++ {
		switch {
		case s[i] == '\\' && i+1 < len(s) && (s[i+1] == ',' || s[i+1] == '\\'):
			i++
			cur.WriteByte(s[i])
		case s[i] == ',':
			out = append(out, cur.String())
			cur.Reset()
		default:
			cur.WriteByte(s[i])
		}
	}
	return append(out, cur.String())
}

// parsePrecision returns the unit of a precision parameter ("" is ns).
func parsePrecision(s string) (time.Duration, bool) {
	switch s {
	case "", "ns", "n":
		return time.Nanosecond, true
	case "us", "u":
		return time.Microsecond, true
	case "ms":
		return time.Millisecond, true
	case "s":
		return time.Second, true
	}
	return 0, false
}

// parseFilterTime parses a start or end: an integer count of unit since
// the Unix epoch (within int64 nanoseconds), or an RFC 3339 time.
func parseFilterTime(s string, unit time.Duration) (int64, bool) {
	if n, err := strconv.ParseInt(s, 10, 64); err == nil {
		d := int64(unit)
		if n > math.MaxInt64/d || n < math.MinInt64/d {
			return 0, false
		}
		return n * d, true
	}
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil || t.Year() < 1678 || t.Year() > 2261 {
		return 0, false
	}
	return t.UnixNano(), true
}

// errOpTagTaken refuses an lp page whose op_tag names a column of the
// table: the line would hold the key twice.
var errOpTagTaken = errors.New("op_tag names a column of the table: choose another tag key")

// errNoFieldForLP refuses an lp page whose selected columns hold no field.
var errNoFieldForLP = errors.New("format=lp needs at least one field column with a value in every row: add a field to columns")

// drain serves GET /drain (docs/contract.md#drain): one page as JSON (envelope and rows),
// NDJSON (one object per row) or line protocol (one line per fragment,
// nanosecond timestamps, no x_ keys); the last two carry the envelope in
// Ingestd-* headers. The page ends before the row that would take its
// rows past Options.MaxPageBytes (one row at least). A drain with a
// consumer records its position, a change of state: a browser's
// cross-site request is refused for it (consumerCrossSite).
func (a *API) drain(w http.ResponseWriter, r *http.Request) {
	req, format, tf, ok := drainParams(w, r)
	if !ok {
		return
	}
	if req.Consumer != "" {
		if a.consumerCrossSite(w, r) {
			return
		}
		req.By = principal(r, req.Table)
	}
	opTag := r.URL.Query().Get("op_tag")
	if opTag != "" {
		if format != formatLP {
			writeClientErr(w, wire.CodeInvalidParameter, "op_tag applies to format=lp only (json and ndjson carry x_op)")
			return
		}
		if err := feed.CheckKey("op_tag", opTag, feed.DefaultMaxNameBytes); err != nil {
			writeClientErr(w, wire.CodeInvalidParameter, err.Error())
			return
		}
		if req.Columns != nil && !slices.Contains(req.Columns, "x_op") {
			req.Columns = append(req.Columns, "x_op")
		}
	}
	a.servePage(w, r, req, format, tf, opTag)
}

// consumerCrossSite refuses, with 403 forbidden, a GET /drain that records
// a consumer's position when a browser sent it from another site
// (docs/security.md#cross-site): the rule crossSite applies to every
// method but GET, HEAD and OPTIONS (Sec-Fetch-Site other than same-origin
// or none; without it, an Origin whose host is not the request's). An
// <img> or a link on another site's page can send a GET, never without
// these headers in a browser that sends them; ingestd's client, the
// mirror, curl and other programs send neither. It reports whether it
// refused.
func (a *API) consumerCrossSite(w http.ResponseWriter, r *http.Request) bool {
	asWrite := r.WithContext(r.Context())
	asWrite.Method = http.MethodPost
	err := a.csrf.Check(asWrite)
	if err == nil {
		return false
	}
	a.m.refused.WithLabelValues(refusedCrossSite).Inc()
	writeJSONErr(w, http.StatusForbidden, wire.CodeForbidden, "cross-site request refused: "+err.Error()+
		" (a drain with consumer= moves the consumer's position: a browser page of another site may not; drain without consumer, or from the same origin)")
	return true
}

// servePage reads one drain page and writes it in format, or writes the
// drain's refusal: GET /drain and a SQL drain (SELECT … WHERE x_seq > N)
// answer alike. formatCSV (SQL only) carries the envelope in the same
// headers as ndjson and lp; an ndjson page whose columns changed starts
// with an x_schema object (docs/contract.md#schema-changes). opTag, when
// set, is the tag key lp lines carry x_op under.
func (a *API) servePage(w http.ResponseWriter, r *http.Request, req feed.DrainRequest, format string, tf timeFormat, opTag string) {
	req.Stop = a.stopCtx.Done()
	// Checked at admission and on every pull (docs/operations.md#revoke-and-reload): a reload that
	// revokes the token or changes its scopes ends the long-poll at once,
	// and the page is answered only if the token still holds the scope.
	grant := auth.FromContext(r.Context())
	if grant != nil {
		stop, cancel := context.WithCancel(a.stopCtx)
		defer cancel()
		defer context.AfterFunc(grant.Context(), cancel)()
		req.Stop = stop.Done()
	}
	enc := encoder{timeFormat: tf, buf: a.pageBuf(), opTag: opTag}
	defer func() { a.releasePageBuf(enc.buf) }()
	// The page's bytes are reserved before anything is read, or for a
	// long-poll at its first row, once its wait is over: a long-poll holds
	// none of the budget while it waits.
	// A JSON page lists the table's columns too (columnsListBytes).
	res := pageBytes{b: a.budget, client: requestClient(r)}
	defer res.release()
	size := int64(a.maxPageBytes)
	if format == formatJSON {
		size += a.columnsListBytes(req.Table)
	}
	if req.Wait == 0 {
		if err := res.reserve(r.Context(), size); err != nil {
			writeErr(w, err)
			return
		}
	}
	rows := 0
	pg, err := a.opts.Drains.Drain(r.Context(), req, func(cols []feed.Column, vals []feed.Value) error {
		if err := res.reserve(r.Context(), size); err != nil {
			return err
		}
		mark := len(enc.buf)
		switch format {
		case formatJSON:
			if rows > 0 {
				enc.buf = append(enc.buf, ',')
			}
			enc.row(vals)
		case formatNDJSON:
			enc.object(cols, vals)
		case formatLP:
			if rows == 0 && opTag != "" && slices.ContainsFunc(cols, func(c feed.Column) bool { return c.Name == opTag }) {
				return errOpTagTaken
			}
			if !enc.line(req.Table, cols, vals) {
				return errNoFieldForLP
			}
		case formatCSV:
			enc.csvRow(req.Table, vals)
		}
		if rows > 0 && len(enc.buf) > a.maxPageBytes {
			// The page ends before this row; the next one starts with it.
			enc.buf = enc.buf[:mark]
			return feed.ErrPageFull
		}
		rows++
		return nil
	})
	if errors.Is(err, errNoFieldForLP) || errors.Is(err, errOpTagTaken) {
		writeClientErr(w, wire.CodeInvalidParameter, err.Error())
		return
	}
	if grant != nil && grant.Err() != nil {
		if _, aerr := a.opts.Auth.Check(r, auth.Drain, req.Table, "drain"); aerr != nil {
			auth.WriteError(w, aerr)
			return
		}
	}
	if err != nil {
		writeErr(w, err)
		return
	}
	// The page's rows and its columns list, as reserved: a long-poll
	// that found no row reserves the list now.
	list := size - int64(a.maxPageBytes)
	if list > 0 {
		if err := res.reserve(r.Context(), list); err != nil {
			writeErr(w, err)
			return
		}
	}
	res.fit(int64(len(enc.buf)) + list)
	if pg.NewConsumer {
		a.audit(r, "consumer.first_drain", req.Table, nil, "consumer", req.Consumer)
	}
	h := w.Header()
	switch format {
	case formatNDJSON, formatLP, formatCSV:
		h.Set("Ingestd-Epoch", strconv.FormatUint(pg.Epoch, 10))
		h.Set("Ingestd-After", strconv.FormatUint(pg.After, 10))
		h.Set("Ingestd-Next", strconv.FormatUint(pg.Next, 10))
		h.Set("Ingestd-Seq", strconv.FormatUint(pg.Seq, 10))
		h.Set("Ingestd-Watermark", strconv.FormatUint(pg.Watermark, 10))
		h.Set("Ingestd-More", strconv.FormatBool(pg.More))
		h.Set("Ingestd-Scan-Limited", strconv.FormatBool(pg.ScanLimited))
		h.Set("Ingestd-Lag-Fragments", strconv.FormatUint(pg.LagFragments, 10))
		h.Set("Ingestd-Lag-Seconds", strconv.FormatFloat(pg.Lag.Seconds(), 'f', 3, 64))
		if len(pg.NewColumns) > 0 {
			nc, all := newColumnsHeader(pg.NewColumns)
			h.Set("Ingestd-New-Columns", nc)
			if !all {
				h.Set("Ingestd-New-Columns-Truncated", "true")
			}
		}
		switch format {
		case formatNDJSON:
			var schema []byte
			if len(pg.NewColumns) > 0 {
				schema = appendNewColumns(append(make([]byte, 0, 128), `{"x_schema":{`...), pg.NewColumns)
				schema = append(schema, "}}\n"...)
			}
			writePage(w, "application/x-ndjson", schema, enc.buf)
		case formatCSV:
			writePage(w, contentTypeCSV, csvHeader(columnNames(pg.Columns)), enc.buf)
		default:
			writePage(w, "text/plain; charset=utf-8", enc.buf)
		}
		return
	}
	head := appendPageHead(make([]byte, 0, 256), pg.Table, pg.Epoch)
	head = appendUintMember(head, "after", pg.After)
	head = appendUintMember(head, "next", pg.Next)
	head = appendUintMember(head, "seq", pg.Seq)
	head = appendUintMember(head, "watermark", pg.Watermark)
	head = append(head, `,"more":`...)
	head = strconv.AppendBool(head, pg.More)
	head = append(head, `,"scan_limited":`...)
	head = strconv.AppendBool(head, pg.ScanLimited)
	head = appendUintMember(head, "lag_fragments", pg.LagFragments)
	head = append(head, `,"lag_seconds":`...)
	head = strconv.AppendFloat(head, pg.Lag.Seconds(), 'f', 3, 64)
	head = append(head, ',')
	head = appendNewColumns(head, pg.NewColumns)
	head = appendColumns(head, pg.Columns)
	head = append(head, `,"rows":[`...)
	writePage(w, "application/json", head, enc.buf, []byte(jsonPageEnd))
}

// appendNewColumns appends `"new_columns":[{"name":…,"kind":…},…]` to b.
func appendNewColumns(b []byte, cols []feed.Column) []byte {
	b = append(b, `"new_columns":[`...)
	for i, c := range cols {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, `{"name":`...)
		b = appendString(b, c.Name)
		b = append(b, `,"kind":"`...)
		b = append(b, c.Kind.String()...)
		b = append(b, '"', '}')
	}
	return append(b, ']')
}

// maxNewColumnsHeaderBytes bounds the Ingestd-New-Columns header, far
// below what HTTP clients accept of a response's headers (Go's: 10 MiB)
// however many and however long the table's column names.
const maxNewColumnsHeaderBytes = 64 << 10

// newColumnsHeader renders the Ingestd-New-Columns header: name:kind
// pairs separated by commas, each name query-escaped, the pairs that fit
// in maxNewColumnsHeaderBytes (all reports whether every one did;
// docs/reference.md#drain-headers).
func newColumnsHeader(cols []feed.Column) (h string, all bool) {
	var sb strings.Builder
	for i, c := range cols {
		pair := url.QueryEscape(c.Name) + ":" + c.Kind.String()
		if sb.Len()+1+len(pair) > maxNewColumnsHeaderBytes {
			return sb.String(), false
		}
		if i > 0 {
			sb.WriteByte(',')
		}
		sb.WriteString(pair)
	}
	return sb.String(), true
}

// appendPageHead appends the start of a JSON drain or rows page,
// `{"table":…,"epoch":…`, to b.
func appendPageHead(b []byte, table string, epoch uint64) []byte {
	b = append(b, `{"table":`...)
	b = appendString(b, table)
	return appendUintMember(b, "epoch", epoch)
}

// appendUintMember appends `,"key":v` to b; key must need no JSON
// escaping.
func appendUintMember(b []byte, key string, v uint64) []byte {
	b = append(b, ',', '"')
	b = append(b, key...)
	b = append(b, '"', ':')
	return strconv.AppendUint(b, v, 10)
}

// jsonPageEnd closes a JSON page's rows and object.
const jsonPageEnd = "]}\n"

// writePage answers 200 with the concatenated parts as the body.
func writePage(w http.ResponseWriter, contentType string, parts ...[]byte) {
	n := 0
	for _, p := range parts {
		n += len(p)
	}
	h := w.Header()
	h.Set("Content-Type", contentType)
	h.Set("Content-Length", strconv.Itoa(n))
	w.WriteHeader(http.StatusOK)
	for _, p := range parts {
		_, _ = w.Write(p)
	}
}
