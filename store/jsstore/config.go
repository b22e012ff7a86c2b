package jsstore

import (
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"net/url"
	"os"
	"regexp"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
)

// The defaults of Config.
const (
	// DefaultReplicas is how many servers hold each stream and bucket: 3
	// survives the loss of one (JetStream's quorum of 2).
	DefaultReplicas = 3
	// DefaultPrefix names ingestd's buckets and streams.
	DefaultPrefix = "ingestd"
	// DefaultDuplicateWindow is how long the streams remember a message
	// id (JetStream's default): a publish retried within it is stored once.
	DefaultDuplicateWindow = 2 * time.Minute
	// DefaultPublishTimeout bounds one commit's publish, retries included:
	// a stream leader election takes a few seconds, and a cluster that lost
	// its meta leader as well may answer nothing for half a minute or more
	// (Kafka's producers retry a send for delivery.timeout.ms, 2 minutes).
	// It stays within DefaultDuplicateWindow, so that a retried send is
	// still recognised as a duplicate.
	DefaultPublishTimeout = 90 * time.Second
	// DefaultSwitchAfter is how long JetStream may be unreachable through
	// the connected server before the connection moves to another: longer
	// than most stream leader elections after a leader's crash (7.3 s at
	// the median, 12.4 s at most over 100 kills in TestJetStreamLeaderKills;
	// NATS's election timeout), when every server is briefly unable to
	// answer and a switch gains nothing (nor harms: the commit is settled
	// and sent again).
	DefaultSwitchAfter = 10 * time.Second
	// DefaultCacheDirName is the cache directory under --data-dir.
	DefaultCacheDirName = "jetstream-cache"
	// DefaultPurgeMinMessages is how many stream sequences retention must
	// have left nothing of before a table's messages among them are purged.
	DefaultPurgeMinMessages = 1000
	// DefaultPurgeGrace is how long a purge waits after the anchor moved
	// (Config.PurgeGrace).
	DefaultPurgeGrace = 10 * time.Second
	// DefaultBarrierInterval is how often at most a node checks a table
	// (a stream info, then a barrier published to its stream) to tell a
	// drain cursor beyond the table's sequence from another node's
	// (Beyond): at most 10 of each a second per table and node, whatever
	// clients send.
	DefaultBarrierInterval = 100 * time.Millisecond
	// DefaultFollowerHeartbeat is how often the server tells a table's
	// idle follower that its pull request still stands: a follower that
	// hears nothing for two of them starts its consumer again. nats.go's
	// own default, 15 s, left a follower whose pull request went nowhere
	// (a server that had not heard of the new consumer yet) stalled for
	// 30 s whenever no Append of this node waited on it: the drains of a
	// table other nodes write saw nothing new meanwhile.
	DefaultFollowerHeartbeat = 2 * time.Second
	// MaxReplicas is JetStream's limit on a stream's replicas.
	MaxReplicas = 5
	// minBarrierInterval and maxBarrierInterval bound
	// Config.BarrierInterval.
	minBarrierInterval, maxBarrierInterval = 10 * time.Millisecond, time.Minute
	// minFollowerHeartbeat and maxFollowerHeartbeat bound
	// Config.FollowerHeartbeat (nats.go: below half the pull request's
	// 30 s expiry; a follower checking every 100 ms never received a
	// message).
	minFollowerHeartbeat, maxFollowerHeartbeat = time.Second, 14 * time.Second
)

// Config configures the JetStream backend. The connection settings follow
// nats.go's options of the same names.
type Config struct {
	// URLs are the NATS servers, comma-separated (nats://, tls://).
	URLs string
	// CredsFile is a NATS credentials file (JWT and NKey seed).
	CredsFile string
	// User and Password authenticate with a user and password.
	User, Password string
	// Token authenticates with a token.
	Token string
	// TLSCA is a PEM file of the CAs the client trusts; TLSCert and TLSKey
	// are the client certificate and key for mutual TLS (both or none).
	TLSCA, TLSCert, TLSKey string
	// Replicas is each stream's and bucket's replica count (1..5).
	Replicas int
	// ClampReplicas lowers Replicas to what the cluster can place instead
	// of refusing to start.
	ClampReplicas bool
	// Prefix names the bucket (PREFIX_meta), the blocks stream
	// (PREFIX_blocks) and its subjects (PREFIX_b.ENC(name)):
	// several ingestd clusters may share a NATS account under different
	// prefixes. Letters, digits, '-' and '_'.
	Prefix string
	// DuplicateWindow is each stream's deduplication window.
	DuplicateWindow time.Duration
	// PublishTimeout bounds one commit's publish, retries included.
	PublishTimeout time.Duration
	// SwitchAfter is how long publishes and JetStream requests may fail
	// through the connected server, without a success in between, before
	// the connection is moved to another server of the pool (a server cut
	// off from its cluster keeps its clients; switch.go). Below
	// PublishTimeout, so that a commit outlives one switch.
	SwitchAfter time.Duration
	// CacheDir is the local badger the rows are materialised into
	// (derived state, rebuilt from the streams at every start). Empty: a
	// subdirectory of --data-dir (cmd/ingestd sets it).
	CacheDir string
	// PurgeMinMessages is how many stream sequences retention must have
	// left nothing of before the table's messages among them are purged (each
	// purge first republishes the table's series dictionary, so a purge
	// per sweep would cost more than it frees).
	PurgeMinMessages int
	// PurgeGrace is how long a purge of a table's messages (retention's,
	// or an ended instance's) waits after the table's record moved its
	// numbering anchor over them: every node's follower must hear of the anchor before the
	// messages go, since a follower of one table's subject sees no gap
	// where another node purged (docs/design.md#scale-out).
	PurgeGrace time.Duration
	// BarrierInterval is the least time between two starts of Beyond's
	// check of a table from this process (10ms..1m): a drain whose cursor
	// is above this node's sequence waits for a check (the stream
	// leader's last sequence, then a barrier: an empty message to the
	// table's stream, acknowledged by its quorum) before it is refused as
	// beyond the sequence; the drains arriving before a check starts
	// share it, and those the interval holds back are answered as not
	// caught up yet (never refused).
	BarrierInterval time.Duration
	// FollowerHeartbeat is the idle heartbeat of each table's follower
	// (1s..14s): with nothing to deliver, the server sends one this
	// often, and a follower that hears nothing for two starts its
	// consumer again from its position. Each idle follower costs the
	// server one small message per heartbeat.
	FollowerHeartbeat time.Duration
	// Materialise says which tables this node keeps rows of (its row
	// cache, which drains, /rows and table counts read): comma-separated
	// table names, each exact or a prefix followed by '*'; "*" (the
	// default) is every table, "" none. Another table's stream is
	// followed by its messages' headers only, enough to number this
	// node's writes (docs/design.md#materialised-tables), and its reads
	// are refused with store.ErrNotServed.
	Materialise string
	// MaxMessageBytes, when positive, caps a block message below the
	// server's max_payload (tests use it to exercise atomic batches); 0
	// follows the server.
	MaxMessageBytes int
}

// DefaultConfig returns the defaults.
func DefaultConfig() Config {
	return Config{Replicas: DefaultReplicas, Prefix: DefaultPrefix, DuplicateWindow: DefaultDuplicateWindow,
		PublishTimeout: DefaultPublishTimeout, SwitchAfter: DefaultSwitchAfter, PurgeMinMessages: DefaultPurgeMinMessages, PurgeGrace: DefaultPurgeGrace,
		BarrierInterval: DefaultBarrierInterval, FollowerHeartbeat: DefaultFollowerHeartbeat, Materialise: "*"}
}

// RegisterFlags registers the backend's flags on fs.
func (c *Config) RegisterFlags(fs *flag.FlagSet) {
	fs.StringVar(&c.URLs, "nats-url", c.URLs, "NATS servers of the JetStream cluster, comma-separated (with --store=jetstream)")
	fs.StringVar(&c.CredsFile, "nats-creds", c.CredsFile, "NATS credentials file (JWT and NKey seed)")
	fs.StringVar(&c.User, "nats-user", c.User, "NATS user name (with --nats-password)")
	fs.StringVar(&c.Password, "nats-password", c.Password, "NATS password")
	fs.StringVar(&c.Token, "nats-token", c.Token, "NATS authentication token")
	fs.StringVar(&c.TLSCA, "nats-tls-ca", c.TLSCA, "PEM file of the CAs trusted for the NATS servers' certificates")
	fs.StringVar(&c.TLSCert, "nats-tls-cert", c.TLSCert, "client certificate (PEM) for mutual TLS with NATS (with --nats-tls-key)")
	fs.StringVar(&c.TLSKey, "nats-tls-key", c.TLSKey, "client key (PEM) for mutual TLS with NATS")
	fs.IntVar(&c.Replicas, "jetstream-replicas", c.Replicas, "replicas of each stream and bucket (1..5; 3 survives losing a server)")
	fs.BoolVar(&c.ClampReplicas, "jetstream-replicas-clamp", c.ClampReplicas, "lower --jetstream-replicas to what the cluster can place instead of refusing to start")
	fs.StringVar(&c.Prefix, "jetstream-prefix", c.Prefix, "prefix of ingestd's bucket and stream names (letters, digits, - and _)")
	fs.DurationVar(&c.DuplicateWindow, "jetstream-duplicate-window", c.DuplicateWindow, "how long a stream remembers a message id: a publish retried within it is stored once")
	fs.DurationVar(&c.PublishTimeout, "jetstream-publish-timeout", c.PublishTimeout, "bound of one commit's publish to JetStream, retries included")
	fs.DurationVar(&c.SwitchAfter, "jetstream-switch-after", c.SwitchAfter, "how long JetStream may be unreachable through the connected NATS server before ingestd reconnects to another (a server cut off from its cluster keeps its clients); below --jetstream-publish-timeout")
	fs.IntVar(&c.PurgeMinMessages, "jetstream-purge-min-messages", c.PurgeMinMessages, "stream sequences retention must have left nothing of before a table's messages among them are purged (each purge first republishes the table's series dictionary)")
	fs.DurationVar(&c.PurgeGrace, "jetstream-purge-grace", c.PurgeGrace, "how long a purge of a table's messages (retention's, or an ended instance's at TRUNCATE and DROP) waits after its record's numbering anchor moved over them, so that every node hears of the anchor first")
	fs.DurationVar(&c.BarrierInterval, "jetstream-barrier-interval", c.BarrierInterval, "least time between two checks of a table (a stream info, then a barrier: an empty message to its stream) this node makes to refuse a drain cursor as beyond the sequence rather than another node's (10ms..1m); drains it holds back get an empty page that keeps the cursor")
	fs.DurationVar(&c.FollowerHeartbeat, "jetstream-follower-heartbeat", c.FollowerHeartbeat, "idle heartbeat of each table's follower (1s..14s): one that hears nothing for two starts its consumer again, so a drain here sees another node's writes after a lost pull request within two of them")
	fs.StringVar(&c.Materialise, "jetstream-materialise", c.Materialise, "tables whose rows this node keeps and serves (drains, /rows, counts): comma-separated names, each exact or a prefix followed by *; * is every table, an empty value none. Other tables' streams are followed by their headers only, enough to number this node's writes, and their reads here answer 421")
	fs.StringVar(&c.CacheDir, "jetstream-cache-dir", c.CacheDir, "local row cache materialised from the streams, rebuilt at every start (default: "+DefaultCacheDirName+" under --data-dir)")
}

var prefixRE = regexp.MustCompile(`^[A-Za-z0-9_-]{1,32}$`)

// Validate reports every invalid setting, joined.
func (c *Config) Validate() error {
	var errs []error
	if strings.TrimSpace(c.URLs) == "" {
		errs = append(errs, errors.New("jsstore: --nats-url is required with --store=jetstream"))
	}
	for _, u := range strings.Split(c.URLs, ",") {
		if strings.TrimSpace(u) == "" {
			continue
		}
		p, err := url.Parse(strings.TrimSpace(u))
		if err != nil || p.Host == "" || (p.Scheme != "nats" && p.Scheme != "tls" && p.Scheme != "ws" && p.Scheme != "wss") {
			errs = append(errs, fmt.Errorf("jsstore: --nats-url %q is not a nats://, tls://, ws:// or wss:// URL with a host", u))
		}
	}
	if (c.User == "") != (c.Password == "") {
		errs = append(errs, errors.New("jsstore: --nats-user and --nats-password go together"))
	}
	auths := 0
	for _, s := range []string{c.CredsFile, c.User, c.Token} {
		if s != "" {
			auths++
		}
	}
	if auths > 1 {
		errs = append(errs, errors.New("jsstore: give one of --nats-creds, --nats-user/--nats-password and --nats-token"))
	}
	if (c.TLSCert == "") != (c.TLSKey == "") {
		errs = append(errs, errors.New("jsstore: --nats-tls-cert and --nats-tls-key go together"))
	}
	for flagName, path := range map[string]string{"--nats-creds": c.CredsFile, "--nats-tls-ca": c.TLSCA, "--nats-tls-cert": c.TLSCert, "--nats-tls-key": c.TLSKey} {
		if path == "" {
			continue
		}
		if _, err := os.Stat(path); err != nil {
			errs = append(errs, fmt.Errorf("jsstore: %s: %w", flagName, err))
		}
	}
	if c.Replicas < 1 || c.Replicas > MaxReplicas {
		errs = append(errs, fmt.Errorf("jsstore: --jetstream-replicas must be within 1..%d", MaxReplicas))
	}
	if !prefixRE.MatchString(c.Prefix) {
		errs = append(errs, errors.New("jsstore: --jetstream-prefix must be 1..32 letters, digits, - or _"))
	}
	if c.DuplicateWindow < time.Second {
		errs = append(errs, errors.New("jsstore: --jetstream-duplicate-window must be at least 1s"))
	}
	if c.PublishTimeout < time.Second || c.PublishTimeout > c.DuplicateWindow {
		errs = append(errs, errors.New("jsstore: --jetstream-publish-timeout must be at least 1s and at most --jetstream-duplicate-window (a send retried later could be stored twice)"))
	}
	if c.SwitchAfter < 100*time.Millisecond || c.SwitchAfter >= c.PublishTimeout {
		errs = append(errs, errors.New("jsstore: --jetstream-switch-after must be at least 100ms and below --jetstream-publish-timeout"))
	}
	if c.PurgeGrace < 0 {
		errs = append(errs, errors.New("jsstore: --jetstream-purge-grace must not be negative"))
	}
	if c.PurgeMinMessages < 1 {
		errs = append(errs, errors.New("jsstore: --jetstream-purge-min-messages must be at least 1"))
	}
	if c.FollowerHeartbeat < minFollowerHeartbeat || c.FollowerHeartbeat > maxFollowerHeartbeat {
		errs = append(errs, fmt.Errorf("jsstore: --jetstream-follower-heartbeat must be within %s..%s", minFollowerHeartbeat, maxFollowerHeartbeat))
	}
	if c.BarrierInterval < minBarrierInterval || c.BarrierInterval > maxBarrierInterval {
		errs = append(errs, fmt.Errorf("jsstore: --jetstream-barrier-interval must be within %s..%s", minBarrierInterval, maxBarrierInterval))
	}
	if c.CacheDir == "" {
		errs = append(errs, errors.New("jsstore: --jetstream-cache-dir must not be empty"))
	}
	for _, p := range strings.Split(c.Materialise, ",") {
		if i := strings.IndexByte(p, '*'); i >= 0 && i != len(p)-1 {
			errs = append(errs, fmt.Errorf("jsstore: --jetstream-materialise: %q: a * may only end a name (a prefix)", p))
		}
	}
	if c.MaxMessageBytes < 0 {
		errs = append(errs, errors.New("jsstore: MaxMessageBytes must not be negative"))
	}
	return errors.Join(errs...)
}

// materialises tells whether this node keeps the rows of the table named
// name (Materialise).
func (c *Config) materialises(name string) bool {
	for _, p := range strings.Split(c.Materialise, ",") {
		if prefix, ok := strings.CutSuffix(p, "*"); ok {
			if strings.HasPrefix(name, prefix) {
				return true
			}
		} else if p == name && p != "" {
			return true
		}
	}
	return false
}

// natsOptions returns the connection options of c: reconnect forever
// (the publish timeout bounds each commit), authentication and TLS.
func (c *Config) natsOptions() []nats.Option {
	opts := []nats.Option{nats.Name("ingestd"), nats.MaxReconnects(-1), nats.ReconnectWait(250 * time.Millisecond),
		nats.RetryOnFailedConnect(false)}
	switch {
	case c.CredsFile != "":
		opts = append(opts, nats.UserCredentials(c.CredsFile))
	case c.User != "":
		opts = append(opts, nats.UserInfo(c.User, c.Password))
	case c.Token != "":
		opts = append(opts, nats.Token(c.Token))
	}
	if c.TLSCA != "" {
		opts = append(opts, nats.RootCAs(c.TLSCA))
	}
	if c.TLSCert != "" {
		opts = append(opts, nats.ClientCert(c.TLSCert, c.TLSKey))
	}
	if c.TLSCA != "" || c.TLSCert != "" {
		opts = append(opts, nats.Secure(&tls.Config{MinVersion: tls.VersionTLS12}))
	}
	return opts
}
