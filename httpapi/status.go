package httpapi

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"html/template"
	"math"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	dto "github.com/prometheus/client_model/go"

	"github.com/ingestd/ingestd/feed"
	"github.com/ingestd/ingestd/httpapi/auth"
)

// Default values of the status page's Config fields.
const (
	DefaultStatusSampleInterval = 10 * time.Second
	DefaultStatusSamples        = 30
	DefaultStatusMaxTables      = 100
	DefaultStatusMaxConsumers   = 100
)

// StatusRateWindow is the span the status page averages its ingest rates
// and commit latency over: the last minute, or all the samples kept when
// they span less (StatusSamples × StatusSampleInterval).
const StatusRateWindow = time.Minute

// statusMaxNameBytes is how many bytes of a table or consumer name the
// status page shows (the rest is elided with "…"): with
// --status-max-tables and --status-max-consumers it bounds the page's
// bytes whatever the names clients create.
const statusMaxNameBytes = 128

// farBehindSeconds is the consumer lag, in seconds, past which the status
// page shows a consumer in red: the threshold of the IngestdConsumerStalled
// alert in deploy/prometheus/ingestd-rules.yml.
const farBehindSeconds = 900

// StatusStats is what the status page (GET /) and the table routes
// (GET /api/v1/tables, GET /api/v1/tables/{table}) read besides the
// tables' state: each table's counted contents and each named consumer's
// lag. *feed.Drainer implements it; its methods are safe for concurrent
// use.
type StatusStats interface {
	// TableStats counts what table name holds (fragments, estimated rows,
	// series, bytes), as of at most --store-table-stats-max-age ago.
	// Errors: feed.ErrTableNotFound, a *feed.NameError, or a storage
	// error.
	TableStats(name string) (feed.TableStats, error)
	// LaggiestConsumers returns the n named consumers furthest behind
	// (in fragments) of the tables allow accepts (nil: all), with their
	// lag in fragments and seconds, each from one snapshot of its table,
	// and the count of the others and their summed lag in fragments.
	LaggiestConsumers(n int, allow func(table string) bool) (top []feed.TableConsumerLag, others int, othersFragments uint64)
}

// faviconSVG is ingestd's icon: a rising line on blue, served at
// /favicon.ico and inlined in the status page.
const faviconSVG = `<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 16 16">` +
	`<rect width="16" height="16" rx="3" fill="#2f6fdb"/>` +
	`<polyline points="2.5,12 6,7.5 9,9.5 13.5,3.5" fill="none" stroke="#fff" stroke-width="2" stroke-linecap="round" stroke-linejoin="round"/></svg>`

// faviconDataURL is faviconSVG as a data: URL, for the status page's
// link rel=icon (no request; no 404 in a browser's console).
var faviconDataURL = template.URL("data:image/svg+xml," + url.PathEscape(faviconSVG))

// favicon serves faviconSVG at GET /favicon.ico, for the clients that ask
// for it by convention rather than by the page's link.
func (a *API) favicon(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "image/svg+xml")
	w.Header().Set("Cache-Control", "public, max-age=86400")
	_, _ = w.Write([]byte(faviconSVG))
}

//go:embed status.html
var statusHTML string

var statusTmpl = template.Must(template.New("status").Funcs(template.FuncMap{
	"bytes": formatBytes,
}).Parse(statusHTML))

// statusSample is one tick of the sampler: each live table's committed
// points and the commit histogram's totals.
type statusSample struct {
	at            time.Time
	points        map[string]uint64
	commits       uint64
	commitSeconds float64
}

// statusSampler keeps the last Options.StatusSamples samples (a ring in a
// slice, oldest first); a sample holds at most --feed-max-tables tables.
type statusSampler struct {
	mu      sync.Mutex // guards samples
	samples []statusSample
}

// RunStatusSampler samples every table's committed points and the commit
// latency every Options.StatusSampleInterval until ctx ends, for the status
// page's rates and sparklines. It returns when ctx ends.
func (a *API) RunStatusSampler(ctx context.Context) {
	a.sampleStatus()
	tick := time.NewTicker(a.opts.StatusSampleInterval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
			a.sampleStatus()
		}
	}
}

func (a *API) sampleStatus() {
	s := statusSample{at: time.Now(), points: map[string]uint64{}}
	for _, t := range a.opts.Tables.Tables() {
		s.points[t.Name] = t.Points
	}
	m := a.gather()
	if h := m.histogram("ingestd_feed_commit_duration_seconds"); h != nil {
		s.commits, s.commitSeconds = h.GetSampleCount(), h.GetSampleSum()
	}
	a.sampler.mu.Lock()
	defer a.sampler.mu.Unlock()
	if len(a.sampler.samples) == a.opts.StatusSamples {
		copy(a.sampler.samples, a.sampler.samples[1:])
		a.sampler.samples = a.sampler.samples[:len(a.sampler.samples)-1]
	}
	a.sampler.samples = append(a.sampler.samples, s)
}

// metricValues is one gather of the registry, by family name.
type metricValues map[string]*dto.MetricFamily

func (a *API) gather() metricValues {
	out := metricValues{}
	if a.opts.Gatherer == nil {
		return out
	}
	fams, err := a.opts.Gatherer.Gather()
	if err != nil {
		a.clientLog.Warn("status page: gather metrics", "err", err)
	}
	for _, f := range fams {
		out[f.GetName()] = f
	}
	return out
}

// sum adds the values of every series of a gauge or counter family; ok is
// false when the family is absent.
func (m metricValues) sum(name string) (v float64, ok bool) {
	f := m[name]
	if f == nil {
		return 0, false
	}
	for _, x := range f.GetMetric() {
		v += x.GetGauge().GetValue() + x.GetCounter().GetValue() + x.GetUntyped().GetValue()
	}
	return v, true
}

func (m metricValues) histogram(name string) *dto.Histogram {
	if f := m[name]; f != nil && len(f.GetMetric()) == 1 {
		return f.GetMetric()[0].GetHistogram()
	}
	return nil
}

// Sparkline is an inline SVG chart of a series of values: Points, a
// polyline's points ("x,y x,y …") in a 100×20 view box, the last value at
// the right, scaled so that Max (the largest value, formatted with its
// unit) is at the top and 0 at the bottom; empty below two values.
type Sparkline struct {
	// Points are the polyline's points; "" draws no chart.
	Points string
	// Max labels the top of the chart: the largest value with its unit.
	Max string
}

// sparkline draws vals, labelling its top with format(the largest value).
func sparkline(vals []float64, format func(float64) string) Sparkline {
	if len(vals) < 2 {
		return Sparkline{}
	}
	hi := 0.0
	for _, v := range vals {
		hi = max(hi, v)
	}
	var b strings.Builder
	for i, v := range vals {
		y := 19.0
		if hi > 0 {
			y = 19 - 18*v/hi
		}
		fmt.Fprintf(&b, "%.1f,%.1f ", 100*float64(i)/float64(len(vals)-1), y)
	}
	return Sparkline{Points: strings.TrimSpace(b.String()), Max: format(hi)}
}

// formatRate renders points per second with one decimal and a unit.
func formatRate(v float64) string { return strconv.FormatFloat(v, 'f', 1, 64) + "/s" }

// formatSeconds renders a duration in seconds as Go does, to the
// microsecond.
func formatSeconds(v float64) string {
	return time.Duration(v * float64(time.Second)).Round(time.Microsecond).String()
}

type statusTable struct {
	Name                  string
	Sync                  bool
	Epoch, Seq, Watermark uint64
	Stats                 feed.TableStats
	StatsErr              string
	Rate                  string // points/s over the rate window, "" before the first sample
	Spark                 Sparkline
	Consumers             []statusConsumer
}

type statusConsumer struct {
	Table, Name     string
	Epoch, Position uint64
	LagFragments    uint64
	LagSeconds      string
	LastSeen        string
	Class           string // "ok", "behind" or "far-behind"
}

type statusPage struct {
	Favicon       template.URL
	Version       string
	Auth          string
	TLS           string
	Store         string
	Now           string
	Refresh       int
	Uptime        string
	QueueDepth    string
	QueueCapacity string
	CommitLatency string
	CommitSpark   Sparkline
	DiskFree      string
	StoreSize     string
	Tables        []statusTable
	Consumers     []statusConsumer
	MoreTables    int
	MoreConsumers int
	Window        string
	RateWindow    string
}

// status serves the status page at GET / (docs/operations.md#status-page): server health, every table (at
// most Options.StatusMaxTables, by name; with an auth file those the token
// holds some scope on, like GET /api/v1/tables) and the
// Options.StatusMaxConsumers laggiest named consumers of those tables,
// server-rendered, refreshing itself every sample interval. Names are cut
// to statusMaxNameBytes, so the page is bounded in bytes.
func (a *API) status(w http.ResponseWriter, r *http.Request) {
	m := a.gather()
	a.sampler.mu.Lock()
	samples := append([]statusSample(nil), a.sampler.samples...)
	a.sampler.mu.Unlock()

	p := statusPage{
		Version: Version, Now: time.Now().UTC().Format(time.RFC3339),
		Refresh:    int(math.Ceil(a.opts.StatusSampleInterval.Seconds())),
		Uptime:     time.Since(a.started).Truncate(time.Second).String(),
		Window:     (time.Duration(a.opts.StatusSamples) * a.opts.StatusSampleInterval).String(),
		RateWindow: a.rateWindow().String(),
		Auth:       a.authMode(), TLS: orNA(a.opts.TLS), Store: orNA(a.opts.Store),
		Favicon: faviconDataURL,
	}
	now := time.Now()
	base := windowBase(samples, now, a.rateWindow())
	p.QueueDepth = metricText(m, "ingestd_feed_queue_depth", strconv.FormatFloat)
	p.QueueCapacity = metricText(m, "ingestd_feed_queue_capacity", strconv.FormatFloat)
	p.DiskFree = metricText(m, "ingestd_store_free_bytes", func(v float64, _ byte, _, _ int) string { return formatBytes(uint64(v)) })
	p.StoreSize = metricText(m, "ingestd_store_size_bytes", func(v float64, _ byte, _, _ int) string { return formatBytes(uint64(v)) })
	var commits uint64
	var commitSeconds float64
	if h := m.histogram("ingestd_feed_commit_duration_seconds"); h != nil {
		commits, commitSeconds = h.GetSampleCount(), h.GetSampleSum()
	}
	p.CommitLatency, p.CommitSpark = commitLatency(samples, base, commits, commitSeconds)

	// With an auth file, the tables on which the token holds some scope
	// (as GET /api/v1/tables lists them).
	tables := a.opts.Tables.Tables()
	var allow func(string) bool
	if g := auth.FromContext(r.Context()); g != nil {
		allow = func(table string) bool { return g.Allows(auth.Any, table) }
		tables = slices.DeleteFunc(tables, func(t feed.TableInfo) bool { return !allow(t.Name) })
	}
	epochs := make(map[string]uint64, len(tables))
	for _, t := range tables {
		epochs[t.Name] = t.Sync.Epoch
	}
	if len(tables) > a.opts.StatusMaxTables {
		p.MoreTables = len(tables) - a.opts.StatusMaxTables
		tables = tables[:a.opts.StatusMaxTables]
	}
	for _, t := range tables {
		st := statusTable{Name: statusName(t.Name), Sync: t.Sync.Enabled, Epoch: t.Sync.Epoch, Seq: t.Sync.Seq, Watermark: t.Sync.Watermark}
		if a.opts.Stats != nil {
			stats, err := a.opts.Stats.TableStats(t.Name)
			if errors.Is(err, feed.ErrNotServed) {
				st.StatsErr = "kept by another node"
			} else if err != nil {
				st.StatsErr = "unavailable"
				a.clientLog.Warn("status page: table stats", "table", t.Name, "err", err)
			}
			st.Stats = stats
		}
		st.Rate, st.Spark = tableRate(samples, base, now, t.Name, t.Points)
		p.Tables = append(p.Tables, st)
	}
	if a.opts.Stats != nil {
		var top []feed.TableConsumerLag
		top, p.MoreConsumers, _ = a.opts.Stats.LaggiestConsumers(a.opts.StatusMaxConsumers, allow)
		for _, l := range top {
			c := statusConsumer{
				Table: statusName(l.Table), Name: statusName(l.Name), Epoch: l.Epoch, Position: l.Position,
				LagFragments: l.Fragments, LagSeconds: strconv.FormatFloat(l.Seconds, 'f', 1, 64),
				LastSeen: l.LastSeen.Format(time.RFC3339), Class: "ok",
			}
			epoch, listed := epochs[l.Table]
			switch {
			case l.Seconds >= farBehindSeconds || listed && l.Epoch != epoch:
				c.Class = "far-behind"
			case l.Fragments > 0:
				c.Class = "behind"
			}
			p.Consumers = append(p.Consumers, c)
		}
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	if err := statusTmpl.Execute(w, p); err != nil {
		a.clientLog.Warn("status page", "err", err)
	}
}

// statusName cuts name to statusMaxNameBytes (at a rune boundary) and
// marks the cut with "…".
func statusName(name string) string {
	if len(name) <= statusMaxNameBytes {
		return name
	}
	cut := statusMaxNameBytes
	for cut > 0 && !utf8.RuneStart(name[cut]) {
		cut--
	}
	return name[:cut] + "…"
}

func metricText(m metricValues, name string, format func(float64, byte, int, int) string) string {
	v, ok := m.sum(name)
	if !ok {
		return "n/a"
	}
	return format(v, 'f', -1, 64)
}

// rateWindow is StatusRateWindow, or the span of the samples kept when
// shorter.
func (a *API) rateWindow() time.Duration {
	return min(StatusRateWindow, time.Duration(a.opts.StatusSamples)*a.opts.StatusSampleInterval)
}

// windowBase returns the sample the rates start from: the newest taken at
// least window before now, else (the samples span less) the oldest; nil
// without samples.
func windowBase(samples []statusSample, now time.Time, window time.Duration) *statusSample {
	if len(samples) == 0 {
		return nil
	}
	base := &samples[0]
	for i := range samples {
		if now.Sub(samples[i].at) >= window {
			base = &samples[i]
		}
	}
	return base
}

// tableRate returns a table's points per second from base to now, when
// it had points committed since the process started (a table created since
// base counts from 0), and the sparkline of its rate in each interval
// between samples. The rate is "" without a base, and 0 when the count
// went down (the table was dropped and created again).
func tableRate(samples []statusSample, base *statusSample, now time.Time, name string, points uint64) (string, Sparkline) {
	var rates []float64
	for i := 1; i < len(samples); i++ {
		prev, ok1 := samples[i-1].points[name]
		cur, ok2 := samples[i].points[name]
		dt := samples[i].at.Sub(samples[i-1].at).Seconds()
		r := 0.0
		if ok1 && ok2 && cur >= prev && dt > 0 {
			r = float64(cur-prev) / dt
		}
		rates = append(rates, r)
	}
	spark := sparkline(rates, formatRate)
	if base == nil {
		return "", spark
	}
	dt := now.Sub(base.at).Seconds()
	prev := base.points[name]
	if dt <= 0 || points < prev {
		return strconv.FormatFloat(0, 'f', 1, 64), spark
	}
	return strconv.FormatFloat(float64(points-prev)/dt, 'f', 1, 64), spark
}

// commitLatency returns the mean group-commit duration from base to now
// (commits and seconds: the commit histogram's count and sum now), "no
// commits" when none was made meanwhile, and the sparkline of the mean in
// each interval between samples.
func commitLatency(samples []statusSample, base *statusSample, commits uint64, seconds float64) (string, Sparkline) {
	var means []float64
	for i := 1; i < len(samples); i++ {
		v := 0.0
		if n := samples[i].commits - samples[i-1].commits; samples[i].commits > samples[i-1].commits {
			v = (samples[i].commitSeconds - samples[i-1].commitSeconds) / float64(n)
		}
		means = append(means, v)
	}
	spark := sparkline(means, formatSeconds)
	if base == nil || commits <= base.commits {
		return "no commits", spark
	}
	return formatSeconds((seconds - base.commitSeconds) / float64(commits-base.commits)), spark
}

// authMode says how clients are admitted: with tokens, loopback ones only
// (protected mode), or every one.
func (a *API) authMode() string {
	switch {
	case a.opts.Auth != nil:
		return "tokens (--auth-file)"
	case a.opts.Protected.On():
		return "protected mode: loopback clients only"
	}
	return "open: no authentication (--insecure-open)"
}

// orNA is s, or "n/a" when empty.
func orNA(s string) string {
	if s == "" {
		return "n/a"
	}
	return s
}

// formatBytes renders n in IEC units (KiB, MiB, …) with one decimal.
func formatBytes(n uint64) string {
	const unit = 1024
	if n < unit {
		return strconv.FormatUint(n, 10) + " B"
	}
	div, exp := uint64(unit), 0
	for m := n / unit; m >= unit; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
}
