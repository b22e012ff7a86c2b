package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"image/png"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/net/html"

	"github.com/ingestd/ingestd/httpapi"
)

// chromiumEnv names the Chromium binary TestStatusPageChromium drives
// (.ci/chromium-e2e.sh installs Debian's chromium and sets it).
const chromiumEnv = "INGESTD_CHROMIUM"

// screenshotEnv, when set, is where TestStatusPageChromium copies its
// screenshot (deploy/screenshots/status.png in docs/operations.md#status-page is made so).
const screenshotEnv = "INGESTD_STATUS_SCREENSHOT"

// tableStats is the "stats" object of GET /api/v1/tables and
// GET /api/v1/tables/{t}.
type tableStats struct {
	Fragments    uint64 `json:"fragments"`
	RowsEstimate uint64 `json:"rows_estimate"`
	Series       uint64 `json:"series"`
	Bytes        uint64 `json:"bytes"`
	CountedAt    string `json:"counted_at"`
}

// startStatusDaemon runs a daemon sampling every 200 ms with known tables:
// sensor WITH SYNC holding 100 lines (one point written twice), room
// auto-created with sync OFF, a table whose name is markup, and two named
// consumers of sensor: audit at 40 (lagging 61) and live caught up, while
// a writer keeps cpu busy until stopWriter is called (or the test ends).
// It returns once the page shows cpu's ingest rate and a commit latency.
func startStatusDaemon(t *testing.T) (d *daemon, stopWriter func()) {
	t.Helper()
	cfg := testConfig(t.TempDir())
	cfg.http.StatusSampleInterval = 200 * time.Millisecond
	d = startDaemon(t, cfg)
	put := func(path, body string) {
		req, err := http.NewRequest(http.MethodPut, d.URL+path, strings.NewReader(body))
		require.NoError(t, err)
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		require.NoError(t, resp.Body.Close())
		require.Equal(t, http.StatusCreated, resp.StatusCode, path)
	}
	put("/api/v1/tables/sensor", `{"sync":true}`)
	put("/api/v1/tables/"+url.PathEscape("<b>x</b>"), `{"sync":false}`)
	var lines strings.Builder
	for i := 1; i <= 100; i++ {
		fmt.Fprintf(&lines, "sensor,host=h%d p=%di %d\n", i%10, i, i)
	}
	require.Equal(t, http.StatusNoContent, postBody(t, d.URL+"/write", lines.String()))
	require.Equal(t, http.StatusNoContent, postBody(t, d.URL+"/write", "sensor,host=h1 p=0i 1\nroom,name=lab temp=21.5 1"))
	for name, after := range map[string]int{"audit": 40, "live": 101} {
		resp, err := http.Get(fmt.Sprintf("%s/drain?table=sensor&epoch=1&after=%d&limit=1&consumer=%s", d.URL, after, name))
		require.NoError(t, err)
		require.NoError(t, resp.Body.Close())
		require.Equal(t, http.StatusOK, resp.StatusCode)
	}
	// A writer keeps cpu (sync OFF) busy: its rate and the commit latency
	// move while the page is looked at.
	stop, stopped := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(stopped)
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			case <-time.After(20 * time.Millisecond):
			}
			resp, err := http.Post(d.URL+"/write", "text/plain", strings.NewReader(fmt.Sprintf("cpu,host=a usage=%d %d", i%100, i)))
			if err == nil {
				_ = resp.Body.Close()
			}
		}
	}()
	var once sync.Once
	stopWriter = func() { once.Do(func() { close(stop); <-stopped }) }
	t.Cleanup(stopWriter)
	pollUntil(t, 20*time.Second, func() bool {
		doc := parseHTML(t, getBody(t, d.URL+"/"))
		rate := cell(doc, "tr", "data-table", "cpu", "rate")
		return rate != "" && rate != "0.0" && !strings.Contains(text(find(doc, "dd", "id", "commit-latency")), "no commits") &&
			findAttr(find(doc, "tr", "data-table", "cpu"), "polyline", "points") != "" && findAttr(find(doc, "dd", "id", "commit-latency"), "polyline", "points") != ""
	}, "the status page shows a rate and the charts")
	return d, stopWriter
}

// checkStatusDOM checks the page's content, whichever client rendered it.
func checkStatusDOM(t *testing.T, doc *html.Node) {
	t.Helper()
	sensor := func(class string) string { return cell(doc, "tr", "data-table", "sensor", class) }
	require.Equal(t, "on", sensor("sync"))
	require.Equal(t, "1", sensor("epoch"))
	require.Equal(t, "101", sensor("seq"))
	require.Equal(t, "101", sensor("watermark"))
	require.Equal(t, "101", sensor("fragments"))
	require.Equal(t, "100", sensor("rows"))
	require.Equal(t, "10", sensor("series"))
	require.NotEmpty(t, sensor("bytes"))
	require.Equal(t, "off", cell(doc, "tr", "data-table", "room", "sync"))
	require.Equal(t, "1", cell(doc, "tr", "data-table", "room", "fragments"))
	// A name that is markup is shown as text, not rendered.
	require.Equal(t, "<b>x</b>", cell(doc, "tr", "data-table", "<b>x</b>", "name"))
	require.Zero(t, findAll(doc, "b"), "no element came from a table name")

	audit := find(doc, "tr", "data-consumer", "audit")
	require.NotNil(t, audit, "consumer audit listed")
	require.Equal(t, "behind", attr(audit, "class"), "a lagging consumer is coloured")
	require.Equal(t, "40", cell(doc, "tr", "data-consumer", "audit", "position"))
	require.Equal(t, "61", cell(doc, "tr", "data-consumer", "audit", "lag-fragments"))
	require.NotEqual(t, "0.0", cell(doc, "tr", "data-consumer", "audit", "lag-seconds"))
	require.Equal(t, "ok", attr(find(doc, "tr", "data-consumer", "live"), "class"))
	require.Equal(t, "0", cell(doc, "tr", "data-consumer", "live", "lag-fragments"))

	for _, id := range []string{"version", "auth", "tls", "store", "uptime", "queue-depth", "commit-latency", "disk-free", "store-size"} {
		n := find(doc, "dd", "id", id)
		require.NotNil(t, n, id)
		require.NotEmpty(t, strings.TrimSpace(text(n)), id)
		require.NotContains(t, text(n), "n/a", id)
	}
	require.Contains(t, text(find(doc, "dd", "id", "queue-depth")), "/ 256")
	require.Equal(t, httpapi.Version, text(find(doc, "dd", "id", "version")))
	require.Equal(t, "protected mode: loopback clients only", text(find(doc, "dd", "id", "auth")))
	require.Equal(t, "off", text(find(doc, "dd", "id", "tls")))
	require.Equal(t, "badger", text(find(doc, "dd", "id", "store")))
	icon := find(doc, "link", "rel", "icon")
	require.NotNil(t, icon, "a favicon")
	require.True(t, strings.HasPrefix(attr(icon, "href"), "data:image/svg+xml,"), attr(icon, "href"))
	// Each chart is labelled with its scale: 0 at the bottom, the max.
	require.Equal(t, findAll(doc, "polyline"), countClass(doc, "spark-max"), "a scale label per chart")
	require.Regexp(t, `^max [0-9.]+/s$`, strings.TrimSpace(text(findClass(find(doc, "tr", "data-table", "cpu"), "spark-max"))))
	refresh := find(doc, "meta", "http-equiv", "refresh")
	require.NotNil(t, refresh, "the page refreshes itself")
	require.Equal(t, "1", attr(refresh, "content"))
	require.Zero(t, findAll(doc, "script"), "no JavaScript")
	require.NotEqual(t, "0.0", cell(doc, "tr", "data-table", "cpu", "rate"), "cpu's ingest rate")
	require.GreaterOrEqual(t, findAll(doc, "polyline"), 5, "a sparkline per table and one for the commit latency")
}

// TestStatusPage checks the server-rendered page as any HTTP client sees it,
// /favicon.ico, and that cpu's rate, averaged over a window, is still
// shown once a whole sample interval passed without writes.
func TestStatusPage(t *testing.T) {
	d, stopWriter := startStatusDaemon(t)
	resp, err := http.Get(d.URL + "/")
	require.NoError(t, err)
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, resp.Body.Close())
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Equal(t, "text/html; charset=utf-8", resp.Header.Get("Content-Type"))
	checkStatusDOM(t, parseHTML(t, body))

	icon, err := http.Get(d.URL + "/favicon.ico")
	require.NoError(t, err)
	iconBody, err := io.ReadAll(icon.Body)
	require.NoError(t, icon.Body.Close())
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, icon.StatusCode)
	require.Equal(t, "image/svg+xml", icon.Header.Get("Content-Type"))
	require.True(t, strings.HasPrefix(string(iconBody), "<svg"))

	// Writes stop: once the chart's last interval is at 0 (its last point
	// at the bottom), the rate over the window still counts the writes.
	stopWriter()
	pollUntil(t, 20*time.Second, func() bool {
		line := findAttr(find(parseHTML(t, getBody(t, d.URL+"/")), "tr", "data-table", "cpu"), "polyline", "points")
		return strings.HasSuffix(line, " 100.0,19.0")
	}, "a sample interval without writes")
	rate := cell(parseHTML(t, getBody(t, d.URL+"/")), "tr", "data-table", "cpu", "rate")
	require.NotEqual(t, "0.0", rate, "the rate is over the window, not the last interval")

	// The same counts in the table routes' JSON.
	var one struct {
		Stats tableStats `json:"stats"`
	}
	require.NoError(t, json.Unmarshal(getBody(t, d.URL+"/api/v1/tables/sensor"), &one))
	require.Equal(t, uint64(101), one.Stats.Fragments)
	require.Equal(t, uint64(100), one.Stats.RowsEstimate)
	require.Equal(t, uint64(10), one.Stats.Series)
	require.Positive(t, one.Stats.Bytes)
	_, err = time.Parse(time.RFC3339Nano, one.Stats.CountedAt)
	require.NoError(t, err)
	var list struct {
		Tables []struct {
			Name  string     `json:"name"`
			Stats tableStats `json:"stats"`
		} `json:"tables"`
	}
	require.NoError(t, json.Unmarshal(getBody(t, d.URL+"/api/v1/tables"), &list))
	byName := map[string]tableStats{}
	for _, tb := range list.Tables {
		byName[tb.Name] = tb.Stats
	}
	require.Equal(t, one.Stats, byName["sensor"])
	require.Equal(t, uint64(1), byName["room"].Fragments)
}

// TestStatusPageChromium renders the page in headless Chromium (Debian's
// chromium; .ci/chromium-e2e.sh), checks the DOM Chromium built and that
// it takes a screenshot of the page at its size.
func TestStatusPageChromium(t *testing.T) {
	bin := os.Getenv(chromiumEnv)
	if bin == "" {
		t.Skip(chromiumEnv + " is not set: .ci/chromium-e2e.sh installs Chromium and runs this test")
	}
	d, _ := startStatusDaemon(t)
	profile := t.TempDir()
	chromium := func(args ...string) []byte {
		ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
		defer cancel()
		args = append([]string{"--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
			"--user-data-dir=" + profile, "--window-size=1200,700"}, args...)
		cmd := exec.CommandContext(ctx, bin, args...)
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		require.NoError(t, cmd.Run(), "chromium %v: %s", args, stderr.String())
		return stdout.Bytes()
	}
	dom := chromium("--dump-dom", d.URL+"/")
	checkStatusDOM(t, parseHTML(t, dom))

	shot := filepath.Join(t.TempDir(), "status.png")
	chromium("--hide-scrollbars", "--screenshot="+shot, d.URL+"/")
	raw, err := os.ReadFile(shot)
	require.NoError(t, err)
	img, err := png.Decode(bytes.NewReader(raw))
	require.NoError(t, err, "the screenshot is a PNG")
	require.Equal(t, 1200, img.Bounds().Dx())
	require.Equal(t, 700, img.Bounds().Dy())
	// The page is not blank: the behind row's amber background is there.
	amber := false
	for y := 0; y < img.Bounds().Dy() && !amber; y += 2 {
		for x := 0; x < img.Bounds().Dx() && !amber; x += 2 {
			r, g, b, _ := img.At(x, y).RGBA()
			amber = r>>8 == 0xff && g>>8 == 0xf4 && b>>8 == 0xd6
		}
	}
	require.True(t, amber, "the screenshot shows the lagging consumer's row")
	// Chromium asked for nothing the server does not have (the favicon is
	// inline).
	notFound, _ := sampleValue(scrapeMetrics(t, d), "ingestd_http_requests_total", map[string]string{"code": "404"})
	require.Zero(t, notFound, "no request of the browser's was answered 404")
	if dst := os.Getenv(screenshotEnv); dst != "" {
		require.NoError(t, os.WriteFile(dst, raw, 0o644))
	}
}

func getBody(t *testing.T, u string) []byte {
	t.Helper()
	resp, err := http.Get(u)
	require.NoError(t, err)
	defer func() { require.NoError(t, resp.Body.Close()) }()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return b
}

func parseHTML(t *testing.T, b []byte) *html.Node {
	t.Helper()
	doc, err := html.Parse(bytes.NewReader(b))
	require.NoError(t, err)
	return doc
}

func attr(n *html.Node, key string) string {
	if n == nil {
		return ""
	}
	for _, a := range n.Attr {
		if a.Key == key {
			return a.Val
		}
	}
	return ""
}

// find returns the first element tag whose attribute key equals val.
func find(n *html.Node, tag, key, val string) *html.Node {
	if n.Type == html.ElementNode && n.Data == tag && attr(n, key) == val {
		return n
	}
	for c := n.FirstChild; c != nil; c = c.NextSibling {
		if f := find(c, tag, key, val); f != nil {
			return f
		}
	}
	return nil
}

// findAll counts the elements tag under n.
func findAll(n *html.Node, tag string) int {
	count := 0
	if n.Type == html.ElementNode && n.Data == tag {
		count++
	}
	for c := n.FirstChild; c != nil; c = c.NextSibling {
		count += findAll(c, tag)
	}
	return count
}

// cell returns the text of the td with class class in the row found by
// find(doc, tag, key, val); "" when either is missing.
func cell(doc *html.Node, tag, key, val, class string) string {
	row := find(doc, tag, key, val)
	if row == nil {
		return ""
	}
	var td *html.Node
	var walk func(n *html.Node)
	walk = func(n *html.Node) {
		if td != nil {
			return
		}
		if n.Type == html.ElementNode && n.Data == "td" && hasClass(n, class) {
			td = n
			return
		}
		for c := n.FirstChild; c != nil; c = c.NextSibling {
			walk(c)
		}
	}
	walk(row)
	if td == nil {
		return ""
	}
	return strings.TrimSpace(text(td))
}

// findClass returns the first element under n with class class.
func findClass(n *html.Node, class string) *html.Node {
	if n == nil {
		return nil
	}
	if n.Type == html.ElementNode && hasClass(n, class) {
		return n
	}
	for c := n.FirstChild; c != nil; c = c.NextSibling {
		if f := findClass(c, class); f != nil {
			return f
		}
	}
	return nil
}

// countClass counts the elements under n with class class.
func countClass(n *html.Node, class string) int {
	count := 0
	if n.Type == html.ElementNode && hasClass(n, class) {
		count++
	}
	for c := n.FirstChild; c != nil; c = c.NextSibling {
		count += countClass(c, class)
	}
	return count
}

// findAttr returns attribute key of the first element tag under n; "" when
// there is none.
func findAttr(n *html.Node, tag, key string) string {
	if n == nil {
		return ""
	}
	if n.Type == html.ElementNode && n.Data == tag {
		return attr(n, key)
	}
	for c := n.FirstChild; c != nil; c = c.NextSibling {
		if v := findAttr(c, tag, key); v != "" {
			return v
		}
	}
	return ""
}

func hasClass(n *html.Node, class string) bool {
	for _, c := range strings.Fields(attr(n, "class")) {
		if c == class {
			return true
		}
	}
	return false
}

func text(n *html.Node) string {
	if n.Type == html.TextNode {
		return n.Data
	}
	var b strings.Builder
	for c := n.FirstChild; c != nil; c = c.NextSibling {
		b.WriteString(text(c))
	}
	return b.String()
}

// TestStatusPageAuth: with --auth-file the page needs a valid token (a
// browser can pass it as ?p=) and shows only the tables, and their
// consumers, the token holds some scope on.
func TestStatusPageAuth(t *testing.T) {
	d, _, tok := authDaemon(t, map[string][]string{"admin": {"admin:*", "drain:*"}, "room": {"drain:room"}}, nil)
	admin := tokenClient(t, d, tok["admin"])
	admin.createSyncTable(t, "sensor")
	admin.createSyncTable(t, "room")
	resp := admin.get(t, "/drain?table=sensor&epoch=1&after=0&limit=1&consumer=audit")
	require.Equal(t, http.StatusOK, resp.Status, string(resp.Body))

	anon, err := http.Get(d.URL + "/")
	require.NoError(t, err)
	require.NoError(t, anon.Body.Close())
	require.Equal(t, http.StatusUnauthorized, anon.StatusCode)

	doc := parseHTML(t, getBody(t, d.URL+"/?p="+tok["room"]))
	require.NotNil(t, find(doc, "tr", "data-table", "room"))
	require.Nil(t, find(doc, "tr", "data-table", "sensor"), "a table outside the token's scopes is not shown")
	require.Nil(t, find(doc, "tr", "data-consumer", "audit"), "nor its consumers")

	doc = parseHTML(t, getBody(t, d.URL+"/?p="+tok["admin"]))
	require.NotNil(t, find(doc, "tr", "data-table", "sensor"))
	require.NotNil(t, find(doc, "tr", "data-consumer", "audit"))
}
