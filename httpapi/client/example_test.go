package client_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/ingestd/ingestd/httpapi/client"
)

// A consumer creates a table WITH SYNC, writes to it and drains its feed
// page by page, storing (Epoch, Next) after each page.
func Example() {
	ctx := context.Background()
	c, err := client.New(serverURL) // e.g. "http://localhost:8086"
	if err != nil {
		panic(err)
	}
	if _, _, err := c.CreateTable(ctx, "sensor", client.TableOptions{Sync: new(true)}); err != nil {
		panic(err)
	}
	err = c.Write(ctx, []byte("sensor,host=h1 p00=1.5 1764410400\nsensor,host=h2 p00=2.5 1764410400\nsensor,host=h1 p00=1.6 1764410410\n"),
		client.WriteOptions{Precision: "s"})
	if err != nil {
		panic(err)
	}
	epoch, next := uint64(0), uint64(0)
	for {
		pg, err := c.Drain(ctx, client.DrainRequest{Table: "sensor", Epoch: epoch, After: next, Limit: 2})
		if err != nil {
			panic(err)
		}
		fmt.Println(pg.Columns, "next", pg.Next, "more", pg.More)
		for _, row := range pg.Rows {
			fmt.Println(client.CellTexts(row))
		}
		epoch, next = pg.Epoch, pg.Next // apply the page, then store the cursor
		if !pg.More {
			break
		}
	}
	fmt.Println("epoch", epoch, "next", next)
	// Output:
	// [time host p00 x_seq x_op] next 2 more true
	// ["2025-11-29T10:00:00Z" "h1" 1.5 1 "insert"]
	// ["2025-11-29T10:00:00Z" "h2" 2.5 2 "insert"]
	// [time host p00 x_seq x_op] next 3 more false
	// ["2025-11-29T10:00:10Z" "h1" 1.6 3 "insert"]
	// epoch 1 next 3
}

// A refusal is an *Error: compare it with the sentinels, or read the
// table's state from it.
func ExampleClient_Drain_refusals() {
	ctx := context.Background()
	c, _ := client.New(serverURL)
	_, _, _ = c.CreateTable(ctx, "audit", client.TableOptions{Sync: new(true)})
	_ = c.Write(ctx, []byte("audit,user=ann action=\"login\" 1\n"), client.WriteOptions{})
	st, _ := c.Truncate(ctx, "audit") // bumps the epoch: cursors of epoch 1 are stale

	_, err := c.Drain(ctx, client.DrainRequest{Table: "audit", Epoch: st.Epoch - 1, After: 1, Limit: 10})
	var refusal *client.Error
	if errors.As(err, &refusal) {
		fmt.Println(refusal.StatusCode, refusal.Code, "epoch", refusal.Epoch, "seq", refusal.Seq, "watermark", refusal.Watermark)
	}
	fmt.Println("stale:", errors.Is(err, client.ErrStaleEpoch), "resync:", client.IsResync(err))

	_, err = c.Drain(ctx, client.DrainRequest{Table: "nosuch", Limit: 10})
	fmt.Println(errors.Is(err, client.ErrTableNotFound), err)
	// Output:
	// 409 stale_epoch epoch 2 seq 1 watermark 1
	// stale: true resync: true
	// true HTTP 404 table_not_found: feed: table not found: "nosuch"
}

// A long-poll drain waits at the head of the feed until a fragment
// arrives (or Wait ends), so a follower need not poll.
func ExampleClient_Drain_longPoll() {
	ctx := context.Background()
	c, _ := client.New(serverURL)
	st, _, _ := c.CreateTable(ctx, "events", client.TableOptions{Sync: new(true)})

	go func() {
		time.Sleep(50 * time.Millisecond) // the drain below is already waiting
		_ = c.Write(ctx, []byte("events kind=\"deploy\" 1\n"), client.WriteOptions{})
	}()
	pg, err := c.Drain(ctx, client.DrainRequest{Table: "events", Epoch: st.Sync.Epoch, After: 0, Limit: 100, Wait: 30 * time.Second})
	if err != nil {
		panic(err)
	}
	fmt.Println(len(pg.Rows), "row; next", pg.Next)
	// Output:
	// 1 row; next 1
}

// The ILP format of a page can be POSTed as is to any InfluxDB /write.
func ExampleClient_Drain_lineProtocol() {
	ctx := context.Background()
	c, _ := client.New(serverURL)
	_, _, _ = c.CreateTable(ctx, "cpu", client.TableOptions{Sync: new(true)})
	_ = c.Write(ctx, []byte("cpu,host=a usage=0.5\ncpu,host=b usage=0.25\n"), client.WriteOptions{Precision: "s", Query: map[string][]string{"db": {"x"}}, Gzip: true})
	pg, err := c.Drain(ctx, client.DrainRequest{Table: "cpu", Limit: 10, Format: client.FormatLP})
	if err != nil {
		panic(err)
	}
	fmt.Println(pg.Lines(), "lines; epoch", pg.Epoch, "next", pg.Next, "more", pg.More)
	// Output:
	// 2 lines; epoch 1 next 2 more false
}

// A mirror bootstraps with the copy by time range, then drains from the
// epoch and watermark the copy reports.
func ExampleClient_Rows() {
	ctx := context.Background()
	c, _ := client.New(serverURL)
	_, _, _ = c.CreateTable(ctx, "room", client.TableOptions{Sync: new(true)})
	_ = c.Write(ctx, []byte("room,name=lab temp=21.5 1\nroom,name=hall temp=19 2\nroom,name=lab temp=21.7 3\n"), client.WriteOptions{})
	var epoch, from uint64
	req := client.RowsRequest{Table: "room", Limit: 2, TimeFormat: "ns"}
	for {
		pg, err := c.Rows(ctx, req)
		if err != nil {
			panic(err)
		}
		for _, row := range pg.Rows {
			fmt.Println(client.CellTexts(row))
		}
		epoch, from = pg.Epoch, pg.Watermark
		if req.Cursor = pg.Cursor; req.Cursor == "" {
			break
		}
	}
	fmt.Println("drain from epoch", epoch, "after", from)
	// Output:
	// [1 "lab" 21.5]
	// [2 "hall" 19]
	// [3 "lab" 21.7]
	// drain from epoch 1 after 3
}

// A named consumer's position is recorded by its drains (or Ack) and read
// back by the source's operator.
func ExampleClient_Consumers() {
	ctx := context.Background()
	c, _ := client.New(serverURL)
	st, _, _ := c.CreateTable(ctx, "orders", client.TableOptions{Sync: new(true)})
	_ = c.Write(ctx, []byte("orders id=1i 1\norders id=2i 2\n"), client.WriteOptions{})

	if err := c.Ack(ctx, "orders", "billing", st.Sync.Epoch, 2); err != nil {
		panic(err)
	}
	cons, _ := c.Position(ctx, "orders", "billing")
	fmt.Println(cons.Name, "epoch", cons.Epoch, "position", cons.Position)

	_ = c.DeleteConsumer(ctx, "orders", "billing")
	_, err := c.Position(ctx, "orders", "billing")
	fmt.Println(errors.Is(err, client.ErrConsumerNotFound))
	// Output:
	// billing epoch 1 position 2
	// true
}

// A rule engine drains only what it reacts to: the updates of two hosts.
// Next passes the fragments the filter left out, so the cursor is stored
// as usual; NewColumns says which columns a typed sink must add first,
// LagFragments how far behind the page ends.
func ExampleClient_Drain_filters() {
	ctx := context.Background()
	c, _ := client.New(serverURL)
	_, _, _ = c.CreateTable(ctx, "alerts", client.TableOptions{Sync: new(true)})
	_ = c.Write(ctx, []byte("alerts,host=a level=1i 1\nalerts,host=b level=1i 1\nalerts,host=c level=1i 1\n"+
		"alerts,host=b level=3i 1\nalerts,host=c level=2i,note=\"disk\" 1\n"), client.WriteOptions{})
	pg, err := c.Drain(ctx, client.DrainRequest{Table: "alerts", Limit: 10, TimeFormat: "ns",
		Tags: map[string][]string{"host": {"b", "c"}}, Operation: client.OpUpdate})
	if err != nil {
		panic(err)
	}
	fmt.Println(pg.Columns)
	for _, row := range pg.Rows {
		fmt.Println(client.CellTexts(row))
	}
	fmt.Println("new columns", pg.NewColumns, "next", pg.Next, "lag", pg.LagFragments)
	// Output:
	// [time host level note x_seq x_op]
	// [1 "b" 3 null 4 "update"]
	// [1 "c" 2 "disk" 5 "update"]
	// new columns [{host tag} {level integer} {note string}] next 5 lag 0
}
