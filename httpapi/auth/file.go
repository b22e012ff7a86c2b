package auth

import (
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"path"
	"path/filepath"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/BurntSushi/toml"
	"gopkg.in/yaml.v3"
)

// Scope is a set of rights a token may hold on tables (docs/operations.md#scopes): Write
// (the ILP write routes), Drain (/drain, /rows, consumer lists) and Admin
// (table and sync management, truncate, drop, consumer deletion). Scopes
// combine as bits: Require(Drain|Admin, …) admits a token holding either.
type Scope uint8

// The scopes.
const (
	Write Scope = 1 << iota
	Drain
	Admin
	// Any is every scope: a route open to any valid token.
	Any = Write | Drain | Admin
)

var scopeNames = [...]struct {
	s    Scope
	name string
}{{Write, "write"}, {Drain, "drain"}, {Admin, "admin"}}

// String names the scopes of s joined by "|".
func (s Scope) String() string {
	var parts []string
	for _, n := range scopeNames {
		if s&n.s != 0 {
			parts = append(parts, n.name)
		}
	}
	return strings.Join(parts, "|")
}

// Limits of the token file's entries.
const (
	// MaxNameBytes bounds a token's name.
	MaxNameBytes = 128
	// MaxTokenBytes bounds a presented credential: a longer one is refused
	// as malformed before it is hashed.
	MaxTokenBytes = 512
	// tokenPrefix heads every token NewToken makes, so that a leaked one is
	// recognisable (as GitHub's ghp_ prefix).
	tokenPrefix = "ingestd_"
	hashPrefix  = "sha256:"
)

// File is the auth file's content (--auth-file), YAML or TOML by its
// extension (.toml is TOML, anything else YAML):
//
//	tokens:
//	  - name: telegraf
//	    hash: sha256:<64 hex digits>
//	    scopes: ["write:*"]
//	    created: "2026-12-01T20:30:00Z"
//	  - name: old-mirror
//	    hash: sha256:<64 hex digits>
//	    scopes: ["drain:sensor*"]
//	    revoked: "2026-12-01T21:00:00Z"
//	tcp:
//	  allow: ["127.0.0.1/32", "10.1.0.0/16"]
//
// A token is stored only as the SHA-256 of its text: tokens are 32 random
// bytes, so a fast hash cannot be brute-forced and a slow one (bcrypt,
// argon2) would only slow every request. A revoked entry stays in the
// file so that its use is reported as "revoked" rather than "unknown".
type File struct {
	Tokens []Entry `yaml:"tokens" toml:"tokens"`               // every token, revoked ones included
	TCP    TCPRule `yaml:"tcp,omitempty" toml:"tcp,omitempty"` // who may write over ILP TCP
}

// Entry is one token of the auth file.
type Entry struct {
	// Name identifies the token in the audit log and `ingestd token`; a
	// TCP client certificate whose identity (common name, else first DNS
	// name) equals Name writes with this token's scopes.
	Name string `yaml:"name" toml:"name"`
	// Hash is "sha256:" and the hex SHA-256 of the token.
	Hash string `yaml:"hash" toml:"hash"`
	// Scopes are "write", "drain" or "admin", each optionally followed by
	// ":" and a table glob (path.Match syntax, as --sync-tables; "*" or no
	// glob is every table): "write:*", "drain:sensor*", "admin:room".
	Scopes []string `yaml:"scopes" toml:"scopes"`
	// Created and Revoked are RFC 3339 times; an entry with Revoked set
	// is refused (401) and kept for the audit trail.
	Created string `yaml:"created,omitempty" toml:"created,omitempty"`
	Revoked string `yaml:"revoked,omitempty" toml:"revoked,omitempty"`
}

// TCPRule admits ILP TCP connections when an auth file is in force: a
// connection whose verified client certificate names a token (Entry.Name)
// writes with that token's write scope; one from an Allow address
// (CIDR prefixes or single addresses) writes every table. Any other
// connection is closed at once.
type TCPRule struct {
	// Allow are the addresses that write every table without a
	// certificate: CIDR prefixes ("10.0.0.0/8") or single addresses.
	Allow []string `yaml:"allow,omitempty" toml:"allow,omitempty"`
}

// grantSpec is an entry as checked: its hash and globs per scope.
type grantSpec struct {
	name string
	hash [sha256.Size]byte
	// globs holds each scope's table globs, in scopeNames order.
	globs [len(scopeNames)][]string
}

// parsed is an auth file as checked.
type parsed struct {
	active  []grantSpec
	revoked map[[sha256.Size]byte]string
	allow   []netip.Prefix
}

// isTOML reports whether the file at p is TOML (by extension).
func isTOML(p string) bool { return strings.EqualFold(filepath.Ext(p), ".toml") }

// decodeFile decodes raw as the format of p, refusing unknown keys.
func decodeFile(p string, raw []byte) (File, error) {
	var f File
	if isTOML(p) {
		md, err := toml.Decode(string(raw), &f)
		if err != nil {
			return f, fmt.Errorf("auth: %s: %w", p, err)
		}
		if und := md.Undecoded(); len(und) > 0 {
			return f, fmt.Errorf("auth: %s: unknown key %q", p, und[0].String())
		}
		return f, nil
	}
	dec := yaml.NewDecoder(bytes.NewReader(raw))
	dec.KnownFields(true)
	// An empty file is io.EOF: no tokens.
	if err := dec.Decode(&f); err != nil && !errors.Is(err, io.EOF) {
		return f, fmt.Errorf("auth: %s: %w", p, err)
	}
	return f, nil
}

// ReadFile reads and checks the auth file at p. A missing file is an
// error.
func ReadFile(p string) (File, error) {
	raw, err := os.ReadFile(p)
	if err != nil {
		return File{}, fmt.Errorf("auth: %w", err)
	}
	f, err := decodeFile(p, raw)
	if err != nil {
		return f, err
	}
	_, err = f.check()
	return f, err
}

// WriteFile writes f to p in p's format, atomically (a temporary file in
// the same directory, fsynced, renamed over p) and readable by its owner
// only.
func WriteFile(p string, f File) (err error) {
	if _, err := f.check(); err != nil {
		return err
	}
	var buf bytes.Buffer
	if isTOML(p) {
		err = toml.NewEncoder(&buf).Encode(f)
	} else {
		enc := yaml.NewEncoder(&buf)
		enc.SetIndent(2)
		err = errors.Join(enc.Encode(f), enc.Close())
	}
	if err != nil {
		return fmt.Errorf("auth: encode %s: %w", p, err)
	}
	tmp, err := os.CreateTemp(filepath.Dir(p), "."+filepath.Base(p)+".tmp*")
	if err != nil {
		return fmt.Errorf("auth: %w", err)
	}
	defer func() {
		if err != nil {
			_ = os.Remove(tmp.Name())
		}
	}()
	if err := tmp.Chmod(0o600); err != nil {
		_ = tmp.Close()
		return fmt.Errorf("auth: %w", err)
	}
	if _, err := tmp.Write(buf.Bytes()); err != nil {
		_ = tmp.Close()
		return fmt.Errorf("auth: %w", err)
	}
	if err := errors.Join(tmp.Sync(), tmp.Close()); err != nil {
		return fmt.Errorf("auth: %w", err)
	}
	if err := os.Rename(tmp.Name(), p); err != nil {
		return fmt.Errorf("auth: %w", err)
	}
	return nil
}

// check validates f: names unique, printable and at most MaxNameBytes,
// hashes well formed and unique, scopes and TCP addresses parsable.
func (f File) check() (parsed, error) {
	out := parsed{revoked: map[[sha256.Size]byte]string{}}
	names := map[string]bool{}
	hashes := map[[sha256.Size]byte]bool{}
	for i, e := range f.Tokens {
		where := fmt.Sprintf("auth: token %d (%q)", i+1, e.Name)
		if err := checkName(e.Name); err != nil {
			return out, fmt.Errorf("%s: %w", where, err)
		}
		if names[e.Name] {
			return out, fmt.Errorf("%s: the name is used twice", where)
		}
		names[e.Name] = true
		h, err := parseHash(e.Hash)
		if err != nil {
			return out, fmt.Errorf("%s: %w", where, err)
		}
		if hashes[h] {
			return out, fmt.Errorf("%s: the hash is used twice", where)
		}
		hashes[h] = true
		for _, ts := range []string{e.Created, e.Revoked} {
			if ts == "" {
				continue
			}
			if _, err := time.Parse(time.RFC3339, ts); err != nil {
				return out, fmt.Errorf("%s: time %q is not RFC 3339", where, ts)
			}
		}
		g := grantSpec{name: e.Name, hash: h}
		for _, s := range e.Scopes {
			sc, glob, err := ParseScope(s)
			if err != nil {
				return out, fmt.Errorf("%s: %w", where, err)
			}
			for i, n := range scopeNames {
				if n.s == sc {
					g.globs[i] = append(g.globs[i], glob)
				}
			}
		}
		if e.Revoked != "" {
			out.revoked[h] = e.Name
			continue
		}
		out.active = append(out.active, g)
	}
	for _, a := range f.TCP.Allow {
		p, err := parsePrefix(a)
		if err != nil {
			return out, fmt.Errorf("auth: tcp.allow %q: %w", a, err)
		}
		out.allow = append(out.allow, p)
	}
	return out, nil
}

// parsePrefix reads a CIDR prefix or a single address.
func parsePrefix(s string) (netip.Prefix, error) {
	if strings.Contains(s, "/") {
		p, err := netip.ParsePrefix(s)
		return p.Masked(), err
	}
	a, err := netip.ParseAddr(s)
	if err != nil {
		return netip.Prefix{}, err
	}
	return netip.PrefixFrom(a.Unmap(), a.Unmap().BitLen()), nil
}

// checkName refuses an empty, over-long, non-UTF-8 or non-printable name.
func checkName(n string) error {
	switch {
	case n == "":
		return errors.New("name is empty")
	case len(n) > MaxNameBytes:
		return fmt.Errorf("name is longer than %d bytes", MaxNameBytes)
	case !utf8.ValidString(n):
		return errors.New("name is not valid UTF-8")
	}
	for _, r := range n {
		if !unicode.IsPrint(r) {
			return errors.New("name holds a non-printable character")
		}
	}
	return nil
}

// ParseScope reads "write", "drain" or "admin", optionally followed by
// ":" and a table glob (path.Match syntax; none or "*" is every table).
func ParseScope(s string) (Scope, string, error) {
	name, glob, found := strings.Cut(s, ":")
	if !found || glob == "" {
		glob = "*"
	}
	if _, err := path.Match(glob, ""); err != nil {
		return 0, "", fmt.Errorf("scope %q: bad glob: %w", s, err)
	}
	for _, n := range scopeNames {
		if n.name == name {
			return n.s, glob, nil
		}
	}
	return 0, "", fmt.Errorf("scope %q: must be write, drain or admin, optionally :glob", s)
}

// parseHash reads "sha256:<64 hex digits>".
func parseHash(s string) ([sha256.Size]byte, error) {
	var h [sha256.Size]byte
	hx, ok := strings.CutPrefix(s, hashPrefix)
	if !ok || len(hx) != 2*sha256.Size {
		return h, errors.New(`hash must be "sha256:" and 64 hex digits (made by ingestd token create)`)
	}
	if _, err := hex.Decode(h[:], []byte(hx)); err != nil {
		return h, errors.New(`hash must be "sha256:" and 64 hex digits (made by ingestd token create)`)
	}
	return h, nil
}

// NewToken returns a new random token ("ingestd_" and 32 random bytes in
// unpadded base64url, 51 characters) and its Entry.Hash.
func NewToken() (token, hash string, err error) {
	var b [32]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", "", fmt.Errorf("auth: random token: %w", err)
	}
	token = tokenPrefix + base64.RawURLEncoding.EncodeToString(b[:])
	sum := sha256.Sum256([]byte(token))
	return token, hashPrefix + hex.EncodeToString(sum[:]), nil
}
