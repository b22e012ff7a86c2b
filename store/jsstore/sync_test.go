package jsstore

import (
	"bytes"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/ingestd/ingestd/store/rowengine"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/stretchr/testify/require"
)

// TestSyncIntervalChecked: where the operator exported the system
// account's VARZ request to ingestd's account, Open reads every server's
// JetStream config: a WARN when sync_interval is not always, none when it
// is.
func TestSyncIntervalChecked(t *testing.T) {
	for _, tc := range []struct {
		sync string
		warn bool
	}{{"", true}, {"sync_interval: always", false}} {
		t.Run(fmt.Sprintf("warn=%t", tc.warn), func(t *testing.T) {
			dir := t.TempDir()
			conf := filepath.Join(dir, "nats.conf")
			require.NoError(t, os.WriteFile(conf, []byte(fmt.Sprintf(`
listen: "127.0.0.1:-1"
jetstream { store_dir: %q
  %s }
accounts {
  SYS { users: [{user: sys, password: sys}], exports: [{service: "$SYS.REQ.SERVER.PING.VARZ"}] }
  APP { jetstream: enabled, users: [{user: app, password: app}],
        imports: [{service: {account: SYS, subject: "$SYS.REQ.SERVER.PING.VARZ"}}] }
}
system_account: SYS
`, filepath.Join(dir, "js"), tc.sync)), 0o600))
			opts, err := server.ProcessConfigFile(conf)
			require.NoError(t, err)
			opts.NoLog, opts.NoSigs = true, true
			srv, err := server.NewServer(opts)
			require.NoError(t, err)
			srv.Start()
			t.Cleanup(func() { srv.Shutdown(); srv.WaitForShutdown() })
			require.True(t, srv.ReadyForConnections(10*time.Second))

			cfg := DefaultConfig()
			cfg.URLs, cfg.User, cfg.Password, cfg.Replicas = srv.ClientURL(), "app", "app", 1
			cfg.CacheDir = filepath.Join(dir, "cache")
			var logs bytes.Buffer
			s, err := Open(cfg, rowengine.DefaultConfig(), slog.New(slog.NewTextHandler(&logs, nil)), nil)
			require.NoError(t, err)
			require.NoError(t, s.Close())
			require.NotContains(t, logs.String(), "cannot read the servers' sync_interval", "the VARZ request was answered")
			if tc.warn {
				require.Contains(t, logs.String(), "does not run with jetstream { sync_interval: always }")
			} else {
				require.NotContains(t, logs.String(), "level=WARN")
			}
		})
	}
}
