package httpapi

import (
	"net/http"
	"strconv"
	"strings"

	"github.com/ingestd/ingestd/feed"
)

// drain serves GET /drain?table=&after=&limit=[&epoch=][&columns=][&format=json][&time_format=]
// (SPEC §6) as one JSON page.
func (a *API) drain(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	req := feed.DrainRequest{Table: q.Get("table")}
	if req.Table == "" {
		writeClientErr(w, CodeInvalidParameter, "table is required")
		return
	}
	ls := q.Get("limit")
	if ls == "" {
		writeClientErr(w, CodeLimitRequired, "limit is required: the feed pages, it does not stream unbounded")
		return
	}
	limit, err := strconv.Atoi(ls)
	if err != nil {
		writeClientErr(w, CodeInvalidLimit, "limit must be an integer, got "+strconv.Quote(ls))
		return
	}
	req.Limit = limit
	if s := q.Get("after"); s != "" {
		if req.After, err = strconv.ParseUint(s, 10, 64); err != nil {
			writeClientErr(w, CodeInvalidParameter, "after must be a non-negative integer, got "+strconv.Quote(s))
			return
		}
	}
	if s := q.Get("epoch"); s != "" {
		if req.Epoch, err = strconv.ParseUint(s, 10, 64); err != nil {
			writeClientErr(w, CodeInvalidParameter, "epoch must be a non-negative integer, got "+strconv.Quote(s))
			return
		}
		req.HasEpoch = true
	}
	if s := q.Get("columns"); s != "" {
		req.Columns = strings.Split(s, ",")
	}
	switch f := q.Get("format"); f {
	case "", "json":
	default:
		writeClientErr(w, CodeInvalidParameter, "format must be json, got "+strconv.Quote(f))
		return
	}
	tf, ok := parseTimeFormat(q.Get("time_format"))
	if !ok {
		writeClientErr(w, CodeInvalidParameter, "time_format must be one of rfc3339, ns, us, ms, s, got "+strconv.Quote(q.Get("time_format")))
		return
	}
	enc := encoder{timeFormat: tf, buf: make([]byte, 0, 64<<10)}
	rows := 0
	pg, err := a.opts.Feed.Drain(r.Context(), req, func(vals []feed.Value) error {
		if rows > 0 {
			enc.buf = append(enc.buf, ',')
		}
		rows++
		enc.row(vals)
		return nil
	})
	if err != nil {
		writeErr(w, err)
		return
	}
	head := make([]byte, 0, 256)
	head = append(head, `{"table":`...)
	head = appendString(head, pg.Table)
	head = append(head, `,"epoch":`...)
	head = strconv.AppendUint(head, pg.Epoch, 10)
	head = append(head, `,"after":`...)
	head = strconv.AppendUint(head, pg.After, 10)
	head = append(head, `,"next":`...)
	head = strconv.AppendUint(head, pg.Next, 10)
	head = append(head, `,"seq":`...)
	head = strconv.AppendUint(head, pg.Seq, 10)
	head = append(head, `,"watermark":`...)
	head = strconv.AppendUint(head, pg.Watermark, 10)
	head = append(head, `,"more":`...)
	head = strconv.AppendBool(head, pg.More)
	head = append(head, `,"columns":[`...)
	for i, c := range pg.Columns {
		if i > 0 {
			head = append(head, ',')
		}
		head = appendString(head, c.Name)
	}
	head = append(head, `],"rows":[`...)
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(head)+len(enc.buf)+3))
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(head)
	_, _ = w.Write(enc.buf)
	_, _ = w.Write([]byte("]}\n"))
}
