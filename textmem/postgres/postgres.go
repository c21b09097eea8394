package postgres

import (
	"bytes"
	"context"
	"crypto/aes"
	"crypto/cipher"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	mrand "math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/memosrt/memosrt/textmem"
)

// Options configure Open.
type Options struct {
	// Key, when set (32 bytes), seals every value with AES-256-GCM and
	// replaces every component of every key, and every cube name, with an
	// HMAC-SHA256 tag before it leaves the process: the server sees
	// neither texts, words, content hashes nor cube names. Every node
	// sharing the database needs the same Key; Open refuses a
	// database written with another key or without one (ErrWrongKey).
	Key []byte
	// Timeout bounds each call to the server. Default 5 s.
	Timeout time.Duration
	// Logger receives reconnects. Default: slog.Default().
	Logger *slog.Logger
}

// ErrWrongKey is returned by Open for a database whose records
// were written with another Options.Key (or with none, or with one
// when none is given now). Nothing is read or written.
var ErrWrongKey = errors.New("textmem: the text store's encryption does not match this node's")

// pgMaxKey is the longest key Open's textmem.Backend takes, bytes: a
// btree entry of the primary key (cube, k) must stay under PostgreSQL's
// limit of about a third of an 8 KiB page (2704 bytes, "index row size
// exceeds maximum" in src/backend/access/nbtree/nbtutils.c).
const pgMaxKey = 2000

// pgChannel is the LISTEN/NOTIFY channel of committed changes. A payload
// is "<node> <c|d> <cube tag>": c for a change, d for a deleted cube.
const pgChannel = "memosrt_text"

const pgSchema = `
CREATE TABLE IF NOT EXISTS memosrt_text (
	cube text  NOT NULL,
	k    bytea NOT NULL,
	v    bytea NOT NULL,
	PRIMARY KEY (cube, k)
);
CREATE TABLE IF NOT EXISTS memosrt_text_cubes (
	tag    text  PRIMARY KEY,
	name   bytea NOT NULL,
	record bytea
);
CREATE TABLE IF NOT EXISTS memosrt_text_meta (
	k text PRIMARY KEY,
	v text NOT NULL
);`

// pgView shows the current memories as JSON, for people who look at the
// database with psql; only made for a database without Key (sealed rows
// would not parse). json, not jsonb: jsonb refuses a text holding U+0000.
const pgView = `
DROP VIEW IF EXISTS memosrt_memories;
CREATE VIEW memosrt_memories AS
	SELECT cube, convert_from(substr(k, 3), 'UTF8') AS id, convert_from(v, 'UTF8')::json AS memory
	FROM memosrt_text WHERE substr(k, 1, 2) = '\x6d2f'::bytea;`

// Store is the textmem.Backend over a PostgreSQL database that several
// memosrt nodes share (Open). It is a textmem.Watcher: each node hears the
// others' commits through LISTEN/NOTIFY on one connection of its own,
// which reconnects by itself.
type Store struct {
	pool    *pgxpool.Pool
	url     string
	where   string // host:port/database, no credentials
	node    string // random id of this process in NOTIFY payloads
	timeout time.Duration
	log     *slog.Logger
	aead    cipher.AEAD // nil without Key
	mac     []byte

	names sync.Map // tag -> cube name, of every cube this process used
	named sync.Map // tag -> true once its memosrt_text_cubes row is known to exist

	up      atomic.Bool // the listening connection is up
	healthy atomic.Bool // the last health check (every second) was answered
	mu      sync.Mutex
	watches map[int]func(textmem.Change)
	nextW   int
	cancel  context.CancelFunc
	done    chan struct{}
	hdone   chan struct{} // health loop ended
}

// Open connects to the PostgreSQL database at url
// (postgres://user:pass@host:port/db), creates memosrt's tables if missing
// and starts listening for other nodes' changes. Errors: ErrWrongKey,
// textmem.ErrUnavailable (wrapped) when the server cannot be reached within
// opts.Timeout, and the server's own (bad password, unknown database).
// Close releases the connections.
func Open(ctx context.Context, url string, opts Options) (*Store, error) {
	if opts.Timeout <= 0 {
		opts.Timeout = 5 * time.Second
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, fmt.Errorf("textmem: postgres url: %w", err)
	}
	cfg.MaxConns = 16
	if cfg.ConnConfig.ConnectTimeout == 0 || cfg.ConnConfig.ConnectTimeout > opts.Timeout {
		cfg.ConnConfig.ConnectTimeout = opts.Timeout
	}
	p := &Store{url: url, timeout: opts.Timeout, log: opts.Logger.With("store", "postgres"),
		watches: map[int]func(textmem.Change){}, done: make(chan struct{}),
		where: fmt.Sprintf("%s:%d/%s", cfg.ConnConfig.Host, cfg.ConnConfig.Port, cfg.ConnConfig.Database)}
	var id [8]byte
	_, _ = rand.Read(id[:])
	p.node = hex.EncodeToString(id[:])
	mode := "plain"
	if len(opts.Key) > 0 {
		if len(opts.Key) != 32 {
			return nil, fmt.Errorf("textmem: postgres key of %d bytes, want 32", len(opts.Key))
		}
		ek := sha256.Sum256(append([]byte("memosrt text seal\x00"), opts.Key...))
		mk := sha256.Sum256(append([]byte("memosrt text mac\x00"), opts.Key...))
		block, _ := aes.NewCipher(ek[:])
		p.aead, _ = cipher.NewGCM(block)
		p.mac = mk[:]
		mode = "sealed " + hex.EncodeToString(p.hmac([]byte("check")))[:16]
	}
	if p.pool, err = pgxpool.NewWithConfig(ctx, cfg); err != nil {
		return nil, fmt.Errorf("textmem: postgres: %w", err)
	}
	err = p.bounded(ctx, func(ctx context.Context) error {
		// one node at a time: concurrent CREATE TABLE IF NOT EXISTS of the
		// same table collide in pg_type (SQLSTATE 23505)
		return pgx.BeginFunc(ctx, p.pool, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(7412063159)`); err != nil {
				return err
			}
			if _, err := tx.Exec(ctx, pgSchema); err != nil {
				return err
			}
			var got string
			err := tx.QueryRow(ctx, `INSERT INTO memosrt_text_meta (k, v) VALUES ('mode', $1)
				ON CONFLICT (k) DO UPDATE SET v = memosrt_text_meta.v RETURNING v`, mode).Scan(&got)
			if err != nil {
				return err
			}
			if got != mode {
				switch {
				case got == "plain":
					return fmt.Errorf("%w: the database holds plain records, this node has a key", ErrWrongKey)
				case p.aead == nil:
					return fmt.Errorf("%w: the database holds sealed records, this node has no key (--encrypt-key-file)", ErrWrongKey)
				}
				return fmt.Errorf("%w: the database's records are sealed under another key", ErrWrongKey)
			}
			if p.aead == nil {
				_, err = tx.Exec(ctx, pgView)
			}
			return err
		})
	})
	if err != nil {
		p.pool.Close()
		return nil, fmt.Errorf("textmem: postgres: %w", err)
	}
	// Listen before returning, so that every commit after Open is
	// heard.
	conn, err := p.listen(ctx)
	if err != nil {
		p.pool.Close()
		return nil, fmt.Errorf("textmem: postgres listen: %w", err)
	}
	p.up.Store(true)
	p.healthy.Store(true)
	lctx, cancel := context.WithCancel(context.Background())
	p.cancel = cancel
	p.hdone = make(chan struct{})
	go p.follow(lctx, conn)
	go func() { defer close(p.hdone); p.health(lctx) }()
	return p, nil
}

// String names the store without credentials: postgres://HOST:PORT/DB.
func (p *Store) String() string { return "postgres://" + p.where }

// Close stops listening and closes the connections. Idempotent.
func (p *Store) Close() error {
	p.mu.Lock()
	cancel := p.cancel
	p.cancel = nil
	p.mu.Unlock()
	if cancel != nil {
		cancel()
		<-p.done
		<-p.hdone
		p.pool.Close()
	}
	return nil
}

// Up reports whether the store answers: false from a lost listening
// connection until it is back, and while the health check (a ping every
// second, answered within one) goes unanswered, as with a hung server that
// keeps its connections open.
func (p *Store) Up() bool { return p.up.Load() && p.healthy.Load() }

// health pings the server every second until ctx ends (Up).
func (p *Store) health(ctx context.Context) {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		pctx, cancel := context.WithTimeout(ctx, min(time.Second, p.timeout))
		err := p.pool.Ping(pctx)
		cancel()
		if ctx.Err() != nil {
			return
		}
		if was := p.healthy.Swap(err == nil); was != (err == nil) {
			if err != nil {
				p.log.Warn("text store not answering", "err", err)
			} else {
				p.log.Info("text store answering again")
			}
		}
	}
}

// Watch implements textmem.Watcher.
func (p *Store) Watch(fn func(textmem.Change)) (stop func()) {
	p.mu.Lock()
	id := p.nextW
	p.nextW++
	p.watches[id] = fn
	p.mu.Unlock()
	return func() {
		p.mu.Lock()
		delete(p.watches, id)
		p.mu.Unlock()
	}
}

func (p *Store) listen(ctx context.Context) (*pgx.Conn, error) {
	ctx, cancel := context.WithTimeout(ctx, p.timeout)
	defer cancel()
	conn, err := pgx.Connect(ctx, p.url)
	if err != nil {
		return nil, unavailable(err)
	}
	if _, err := conn.Exec(ctx, "LISTEN "+pgChannel); err != nil {
		_ = conn.Close(context.Background())
		return nil, unavailable(err)
	}
	return conn, nil
}

// follow delivers notifications from conn until ctx ends, reconnecting
// (100 ms to 1 s apart) when the connection is lost; after a reconnect it
// delivers textmem.Change{All: true}, since commits in between were not heard.
func (p *Store) follow(ctx context.Context, conn *pgx.Conn) {
	defer close(p.done)
	wait := 100 * time.Millisecond
	for {
		for conn != nil {
			n, err := conn.WaitForNotification(ctx)
			if err != nil {
				_ = conn.Close(context.Background())
				conn = nil
				if ctx.Err() != nil {
					return
				}
				p.up.Store(false)
				p.log.Warn("text store connection lost", "err", err)
				break
			}
			p.notify(n.Payload)
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
		c, err := p.listen(ctx)
		if err != nil {
			wait = min(2*wait, time.Second)
			continue
		}
		conn, wait = c, 100*time.Millisecond
		p.up.Store(true)
		p.log.Info("text store connection back")
		p.deliver(textmem.Change{All: true})
	}
}

// payload is the NOTIFY payload of a transaction of op ('c' or 'd') over
// tag: "<node> d <tag>" for a deleted cube; "<node> m <tag> <ids>" when
// it changed only the memories it touched (ids comma-separated, sealed
// and base64'd with Key, at most 64 of them); else "<node> c <tag>", or
// nothing when it wrote nothing.
func (p *Store) payload(op byte, tag string, t *pgTxn) string {
	switch {
	case op == 0:
		return ""
	case op == 'd':
		return p.node + " d " + tag
	case !t.wrote && op == 'c' && len(t.touched) == 0:
		return "" // read only: a duplicate Add
	case len(t.touched) > 0 && len(t.touched) <= 64:
		ids := strings.Join(t.touched, ",")
		if p.aead != nil {
			ids = base64.RawURLEncoding.EncodeToString(p.seal([]byte(tag+"\x00ids"), []byte(ids)))
		}
		return p.node + " m " + tag + " " + ids
	}
	return p.node + " c " + tag
}

func (p *Store) notify(payload string) {
	f := strings.Fields(payload)
	if len(f) < 3 || f[0] == p.node {
		return
	}
	name, ok := p.names.Load(f[2])
	if !ok {
		return // a cube this process never used: nothing of it is loaded
	}
	c := textmem.Change{Cube: name.(string), Deleted: f[1] == "d"}
	if f[1] == "m" && len(f) == 4 {
		ids := []byte(f[3])
		if p.aead != nil {
			b, err := base64.RawURLEncoding.DecodeString(f[3])
			if err == nil {
				ids, err = p.open([]byte(f[2]+"\x00ids"), b)
			}
			if err != nil {
				ids = nil // unreadable: reload the whole cube
			}
		}
		if len(ids) > 0 {
			c.IDs = strings.Split(string(ids), ",")
		}
	}
	p.deliver(c)
}

func (p *Store) deliver(c textmem.Change) {
	p.mu.Lock()
	fns := make([]func(textmem.Change), 0, len(p.watches))
	for _, fn := range p.watches {
		fns = append(fns, fn)
	}
	p.mu.Unlock()
	for _, fn := range fns {
		fn(c)
	}
}

// unavailable wraps err with textmem.ErrUnavailable unless the server answered it
// (a PostgreSQL error other than a connection or resource one).
func unavailable(err error) error {
	if err == nil || errors.Is(err, textmem.ErrUnavailable) {
		return err
	}
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		switch {
		case strings.HasPrefix(pe.Code, "08"), strings.HasPrefix(pe.Code, "53"),
			pe.Code == "57P01", pe.Code == "57P02", pe.Code == "57P03":
		default:
			return err
		}
	}
	return fmt.Errorf("%w: %v", textmem.ErrUnavailable, err)
}

// retryable reports a serialization failure or deadlock: the transaction
// is run again.
func retryable(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && (pe.Code == "40001" || pe.Code == "40P01")
}

// bounded runs fn with ctx bounded by the call timeout; running out of it
// (the caller's ctx still live) is textmem.ErrUnavailable.
func (p *Store) bounded(ctx context.Context, fn func(context.Context) error) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	bctx, cancel := context.WithTimeout(ctx, p.timeout)
	defer cancel()
	err := fn(bctx)
	if err != nil && ctx.Err() != nil {
		return ctx.Err()
	}
	if err != nil && bctx.Err() != nil && !errors.Is(err, textmem.ErrUnavailable) {
		err = fmt.Errorf("%w: no answer within %v: %v", textmem.ErrUnavailable, p.timeout, err)
	}
	return err
}

func (p *Store) hmac(parts ...[]byte) []byte {
	h := hmac.New(sha256.New, p.mac)
	for _, b := range parts {
		h.Write(b)
		h.Write([]byte{0})
	}
	return h.Sum(nil)
}

// tag is cube's name in the database: the name itself, or with Key 32
// hex digits of its HMAC.
func (p *Store) tag(cube string) string {
	t := cube
	if p.aead != nil {
		t = hex.EncodeToString(p.hmac([]byte("cube"), []byte(cube)))[:32]
	}
	p.names.Store(t, cube)
	return t
}

// physKey is key as stored: itself, or with Key each component (split at
// '/' and 0, which are kept) replaced by 16 bytes of its HMAC under the
// cube's tag, so that a prefix of whole components maps to a prefix.
func (p *Store) physKey(tag string, key []byte) []byte {
	if p.aead == nil {
		if key == nil {
			return []byte{} // pgx sends nil as NULL: k >= NULL matches nothing
		}
		return key
	}
	out := make([]byte, 0, 2*len(key)+16)
	start := 0
	for i := 0; i <= len(key); i++ {
		if i < len(key) && key[i] != '/' && key[i] != 0 {
			continue
		}
		if i > start {
			out = append(out, p.hmac([]byte(tag), key[start:i])[:16]...)
		}
		if i < len(key) {
			out = append(out, key[i])
		}
		start = i + 1
	}
	return out
}

func (p *Store) seal(ad, plain []byte) []byte {
	if p.aead == nil {
		return plain
	}
	nonce := make([]byte, p.aead.NonceSize(), p.aead.NonceSize()+len(plain)+p.aead.Overhead())
	_, _ = rand.Read(nonce)
	return p.aead.Seal(nonce, nonce, plain, ad)
}

var errSealed = errors.New("textmem: a sealed record does not open with this key (corrupt or tampered)")

func (p *Store) open(ad, sealed []byte) ([]byte, error) {
	if p.aead == nil {
		return sealed, nil
	}
	ns := p.aead.NonceSize()
	if len(sealed) < ns {
		return nil, errSealed
	}
	out, err := p.aead.Open(nil, sealed[:ns], sealed[ns:], ad)
	if err != nil {
		return nil, errSealed
	}
	return out, nil
}

// sealValue is a row's v: value, or with Key the sealed (key, value) bound
// to the row's place (tag, physical key).
func (p *Store) sealValue(tag string, pk, key, value []byte) []byte {
	if p.aead == nil {
		return value
	}
	b := binary.AppendUvarint(make([]byte, 0, 4+len(key)+len(value)), uint64(len(key)))
	b = append(append(b, key...), value...)
	return p.seal(append([]byte(tag+"\x00"), pk...), b)
}

// openValue reverses sealValue, returning the logical key and value.
func (p *Store) openValue(tag string, pk, v []byte) (key, value []byte, err error) {
	if p.aead == nil {
		return pk, v, nil
	}
	b, err := p.open(append([]byte(tag+"\x00"), pk...), v)
	if err != nil {
		return nil, nil, err
	}
	n, m := binary.Uvarint(b)
	if m <= 0 || uint64(len(b)-m) < n {
		return nil, nil, errSealed
	}
	return b[m : m+int(n)], b[m+int(n):], nil
}

// prefixEnd is the least key greater than every key starting with pre;
// nil when there is none (pre empty or all 0xff).
func prefixEnd(pre []byte) []byte {
	end := bytes.Clone(pre)
	for len(end) > 0 {
		if end[len(end)-1] < 0xff {
			end[len(end)-1]++
			return end
		}
		end = end[:len(end)-1]
	}
	return nil
}

// pgTxn is one transaction over one cube. Writes are queued and sent in
// one round trip (a pgx.Batch) before the next read or the commit.
type pgTxn struct {
	p       *Store
	ctx     context.Context
	tx      pgx.Tx
	tag     string
	pending *pgx.Batch
	wrote   bool     // a write was queued
	touched []string // memories changed (Touch)
}

// Touch implements textmem.Toucher.
func (t *pgTxn) Touch(id string) {
	if !slices.Contains(t.touched, id) {
		t.touched = append(t.touched, id)
	}
}

func (t *pgTxn) queue(sql string, args ...any) {
	t.wrote = true
	if t.pending == nil {
		t.pending = &pgx.Batch{}
	}
	t.pending.Queue(sql, args...)
}

// flush sends the queued writes; the first one's error is returned.
func (t *pgTxn) flush() error {
	if t.pending == nil || t.pending.Len() == 0 {
		return nil
	}
	b := t.pending
	t.pending = nil
	return unavailable(t.tx.SendBatch(t.ctx, b).Close())
}

func (t *pgTxn) Get(key []byte) ([]byte, error) {
	if err := t.flush(); err != nil {
		return nil, err
	}
	pk := t.p.physKey(t.tag, key)
	var v []byte
	err := t.tx.QueryRow(t.ctx, `SELECT v FROM memosrt_text WHERE cube = $1 AND k = $2`, t.tag, pk).Scan(&v)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, textmem.ErrKeyNotFound
	}
	if err != nil {
		return nil, unavailable(err)
	}
	_, v, err = t.p.openValue(t.tag, pk, v)
	return v, err
}

func (t *pgTxn) Set(key, value []byte) error {
	if len(key) > pgMaxKey {
		return fmt.Errorf("%w: key of %d bytes", textmem.ErrTxnTooBig, len(key))
	}
	pk := t.p.physKey(t.tag, key)
	t.queue(`INSERT INTO memosrt_text (cube, k, v) VALUES ($1, $2, $3)
		ON CONFLICT (cube, k) DO UPDATE SET v = EXCLUDED.v`, t.tag, pk, t.p.sealValue(t.tag, pk, bytes.Clone(key), bytes.Clone(value)))
	return nil
}

func (t *pgTxn) Delete(key []byte) error {
	t.queue(`DELETE FROM memosrt_text WHERE cube = $1 AND k = $2`, t.tag, bytes.Clone(t.p.physKey(t.tag, key)))
	return nil
}

// CheckRecord implements textmem.RecordChecker: it reads cube's record row with
// a share lock, so that a cube delete (DeletePrefix of the whole cube)
// waits for this transaction or this one sees the record gone.
func (t *pgTxn) CheckRecord() error {
	if err := t.flush(); err != nil {
		return err
	}
	var has bool
	err := t.tx.QueryRow(t.ctx, `SELECT record IS NOT NULL FROM memosrt_text_cubes WHERE tag = $1 FOR SHARE`, t.tag).Scan(&has)
	if errors.Is(err, pgx.ErrNoRows) || (err == nil && !has) {
		return textmem.ErrNoRecord
	}
	return unavailable(err)
}

// GetMany returns the values of keys in one query (nil where a key has
// none); hits uses it to read the winning memories in one round trip.
func (t *pgTxn) GetMany(keys [][]byte) ([][]byte, error) {
	if err := t.flush(); err != nil {
		return nil, err
	}
	pks := make([][]byte, len(keys))
	at := make(map[string]int, len(keys))
	for i, k := range keys {
		pks[i] = t.p.physKey(t.tag, k)
		at[string(pks[i])] = i
	}
	rows, err := t.tx.Query(t.ctx, `SELECT k, v FROM memosrt_text WHERE cube = $1 AND k = ANY($2)`, t.tag, pks)
	if err != nil {
		return nil, unavailable(err)
	}
	defer rows.Close()
	out := make([][]byte, len(keys))
	for rows.Next() {
		var k, v []byte
		if err := rows.Scan(&k, &v); err != nil {
			return nil, unavailable(err)
		}
		i, ok := at[string(k)]
		if !ok {
			continue
		}
		if _, v, err = t.p.openValue(t.tag, k, v); err != nil {
			return nil, err
		}
		out[i] = v
	}
	return out, unavailable(rows.Err())
}

// pgPage is the number of rows Iterate reads per query.
const pgPage = 2048

func (t *pgTxn) Iterate(prefix []byte, keysOnly bool, fn func(key, value []byte) error) error {
	if err := t.flush(); err != nil {
		return err
	}
	pre := t.p.physKey(t.tag, prefix)
	end := prefixEnd(pre)
	sealed := t.p.aead != nil
	cols := "k, v"
	if keysOnly && !sealed {
		cols = "k, NULL::bytea"
	}
	type kv struct{ k, v []byte }
	var all []kv // with Key: every row, sorted by logical key before fn sees them
	from, incl := pre, true
	for {
		q := `SELECT ` + cols + ` FROM memosrt_text WHERE cube = $1 AND k `
		if incl {
			q += `>=`
		} else {
			q += `>`
		}
		q += ` $2`
		args := []any{t.tag, from}
		if end != nil {
			q += ` AND k < $3`
			args = append(args, end)
		}
		q += fmt.Sprintf(` ORDER BY k LIMIT %d`, pgPage)
		rows, err := t.tx.Query(t.ctx, q, args...)
		if err != nil {
			return unavailable(err)
		}
		var page []kv
		for rows.Next() {
			var r kv
			if err := rows.Scan(&r.k, &r.v); err != nil {
				rows.Close()
				return unavailable(err)
			}
			page = append(page, r)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return unavailable(err)
		}
		for _, r := range page {
			if !sealed {
				if err := fn(r.k, r.v); err != nil {
					return err
				}
				continue
			}
			k, v, err := t.p.openValue(t.tag, r.k, r.v)
			if err != nil {
				return err
			}
			if keysOnly {
				v = nil
			}
			all = append(all, kv{k, v})
		}
		if len(page) < pgPage {
			break
		}
		from, incl = page[len(page)-1].k, false
	}
	slices.SortFunc(all, func(a, b kv) int { return bytes.Compare(a.k, b.k) })
	for _, r := range all {
		if err := fn(r.k, r.v); err != nil {
			return err
		}
	}
	return nil
}

// nameRow makes sure cube's row of memosrt_text_cubes exists (inside tx,
// so it commits with the first record of the cube).
func (p *Store) nameRow(ctx context.Context, tx pgx.Tx, tag, cube string) error {
	if _, ok := p.named.Load(tag); ok {
		return nil
	}
	_, err := tx.Exec(ctx, `INSERT INTO memosrt_text_cubes (tag, name) VALUES ($1, $2) ON CONFLICT (tag) DO NOTHING`,
		tag, p.seal([]byte(tag), []byte(cube)))
	return unavailable(err)
}

// txn runs fn in one transaction of isolation iso over cube, retrying
// serialization failures, and with notify publishes op ('c' or 'd') to the
// other nodes at commit.
func (p *Store) txn(ctx context.Context, cube string, iso pgx.TxIsoLevel, notify byte, fn func(*pgTxn) error) error {
	tag := p.tag(cube)
	for attempt := 0; ; attempt++ {
		var fnErr error
		err := p.bounded(ctx, func(ctx context.Context) error {
			access := pgx.ReadWrite
			if notify == 0 {
				access = pgx.ReadOnly
			}
			tx, err := p.pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: iso, AccessMode: access})
			if err != nil {
				return unavailable(err)
			}
			defer func() { _ = tx.Rollback(context.Background()) }()
			if notify != 0 {
				if err := p.nameRow(ctx, tx, tag, cube); err != nil {
					return err
				}
			}
			t := &pgTxn{p: p, ctx: ctx, tx: tx, tag: tag}
			if fnErr = fn(t); fnErr != nil {
				return fnErr
			}
			if err := t.flush(); err != nil {
				return err
			}
			if payload := p.payload(notify, tag, t); payload != "" {
				if _, err := tx.Exec(ctx, `SELECT pg_notify($1, $2)`, pgChannel, payload); err != nil {
					return unavailable(err)
				}
			}
			if err := tx.Commit(ctx); err != nil {
				if retryable(err) {
					return err
				}
				return unavailable(err)
			}
			return nil
		})
		if err == nil {
			if notify != 0 {
				p.named.Store(tag, true)
			}
			return nil
		}
		if retryable(err) && attempt < 50 {
			time.Sleep(time.Duration(1+mrand.IntN(1<<min(attempt, 5))) * time.Millisecond)
			continue
		}
		return err
	}
}

// View implements textmem.Backend (a REPEATABLE READ snapshot: reads see one
// state of the database).
func (p *Store) View(ctx context.Context, cube string, fn func(textmem.Txn) error) error {
	return p.txn(ctx, cube, pgx.RepeatableRead, 0, func(t *pgTxn) error { return fn(t) })
}

// Update implements textmem.Backend: a SERIALIZABLE transaction, run again on a
// serialization failure (SQLSTATE 40001) or deadlock (40P01), up to 50
// times.
func (p *Store) Update(ctx context.Context, cube string, fn func(textmem.Txn) error) error {
	return p.txn(ctx, cube, pgx.Serializable, 'c', func(t *pgTxn) error { return fn(t) })
}

// Bulk implements textmem.Backend: puts are written in transactions of 512 rows.
func (p *Store) Bulk(ctx context.Context, cube string, fn func(put func(key, value []byte) error) error) error {
	type kv struct{ k, v []byte }
	var batch []kv
	flush := func() error {
		if len(batch) == 0 {
			return nil
		}
		err := p.txn(ctx, cube, pgx.ReadCommitted, 'c', func(t *pgTxn) error {
			for _, r := range batch {
				if err := t.Set(r.k, r.v); err != nil {
					return err
				}
			}
			return nil
		})
		batch = batch[:0]
		return err
	}
	err := fn(func(k, v []byte) error {
		batch = append(batch, kv{bytes.Clone(k), bytes.Clone(v)})
		if len(batch) == 512 {
			return flush()
		}
		return nil
	})
	if err != nil {
		return err
	}
	return flush()
}

// DeletePrefix implements textmem.Backend in one transaction; deleting a whole
// cube tells the other nodes it was deleted.
func (p *Store) DeletePrefix(ctx context.Context, cube string, prefix []byte) error {
	op := byte('c')
	if len(prefix) == 0 {
		op = 'd'
	}
	return p.txn(ctx, cube, pgx.Serializable, op, func(t *pgTxn) error {
		t.wrote = true
		pre := p.physKey(t.tag, prefix)
		var err error
		if len(prefix) == 0 {
			// the whole cube: its record goes in the same transaction, so a
			// write on another node that checks the record (CheckRecord)
			// either commits before and is deleted here, or sees none
			if _, err := t.tx.Exec(t.ctx, `UPDATE memosrt_text_cubes SET record = NULL WHERE tag = $1`, t.tag); err != nil {
				return unavailable(err)
			}
		}
		if end := prefixEnd(pre); end != nil {
			_, err = t.tx.Exec(t.ctx, `DELETE FROM memosrt_text WHERE cube = $1 AND k >= $2 AND k < $3`, t.tag, pre, end)
		} else {
			_, err = t.tx.Exec(t.ctx, `DELETE FROM memosrt_text WHERE cube = $1 AND k >= $2`, t.tag, pre)
		}
		return unavailable(err)
	})
}

// cubeRow is a row of memosrt_text_cubes, opened.
type cubeRow struct {
	tag, name string
	record    []byte // nil: none
}

// recordAD binds a sealed record to its cube's row.
func recordAD(tag string) []byte { return []byte(tag + "\x00record") }

// cubeRows returns the rows of memosrt_text_cubes (with onlyRecords, those
// holding a record).
func (p *Store) cubeRows(ctx context.Context, onlyRecords bool) ([]cubeRow, error) {
	var out []cubeRow
	err := p.bounded(ctx, func(ctx context.Context) error {
		q := `SELECT tag, name, record FROM memosrt_text_cubes`
		if onlyRecords {
			q += ` WHERE record IS NOT NULL`
		}
		rows, err := p.pool.Query(ctx, q)
		if err != nil {
			return unavailable(err)
		}
		defer rows.Close()
		for rows.Next() {
			var tag string
			var name, rec []byte
			if err := rows.Scan(&tag, &name, &rec); err != nil {
				return unavailable(err)
			}
			if name, err = p.open([]byte(tag), name); err != nil {
				return err
			}
			if rec != nil {
				if rec, err = p.open(recordAD(tag), rec); err != nil {
					return err
				}
			}
			p.names.Store(tag, string(name))
			out = append(out, cubeRow{tag, string(name), rec})
		}
		return unavailable(rows.Err())
	})
	return out, err
}

// Cubes implements textmem.Backend.
func (p *Store) Cubes(ctx context.Context, prefix []byte) ([]string, error) {
	rows, err := p.cubeRows(ctx, false)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, r := range rows {
		if !textmem.ValidCube(r.name) {
			continue // a space of the server's own records (textmem.KeySpace)
		}
		tag := r.tag
		pre := p.physKey(tag, prefix)
		var one int
		err := p.bounded(ctx, func(ctx context.Context) error {
			q := `SELECT 1 FROM memosrt_text WHERE cube = $1 AND k >= $2`
			args := []any{tag, pre}
			if end := prefixEnd(pre); end != nil {
				q += ` AND k < $3`
				args = append(args, end)
			}
			return p.pool.QueryRow(ctx, q+` LIMIT 1`, args...).Scan(&one)
		})
		switch {
		case err == nil:
			out = append(out, r.name)
		case !errors.Is(err, pgx.ErrNoRows):
			return nil, unavailable(err)
		}
	}
	return out, nil
}

// Record implements textmem.Backend.
func (p *Store) Record(ctx context.Context, cube string) ([]byte, error) {
	tag := p.tag(cube)
	var rec []byte
	err := p.bounded(ctx, func(ctx context.Context) error {
		return p.pool.QueryRow(ctx, `SELECT record FROM memosrt_text_cubes WHERE tag = $1`, tag).Scan(&rec)
	})
	if errors.Is(err, pgx.ErrNoRows) || (err == nil && rec == nil) {
		return nil, textmem.ErrNoRecord
	}
	if err != nil {
		return nil, unavailable(err)
	}
	return p.open(recordAD(tag), rec)
}

// CreateRecord implements textmem.Backend.
func (p *Store) CreateRecord(ctx context.Context, cube string, rec []byte) error {
	tag := p.tag(cube)
	var tagOut string
	err := p.bounded(ctx, func(ctx context.Context) error {
		return p.pool.QueryRow(ctx, `INSERT INTO memosrt_text_cubes (tag, name, record) VALUES ($1, $2, $3)
			ON CONFLICT (tag) DO UPDATE SET record = EXCLUDED.record WHERE memosrt_text_cubes.record IS NULL
			RETURNING tag`, tag, p.seal([]byte(tag), []byte(cube)), p.seal(recordAD(tag), rec)).Scan(&tagOut)
	})
	if errors.Is(err, pgx.ErrNoRows) {
		return textmem.ErrRecordExists
	}
	if err == nil {
		p.named.Store(tag, true)
	}
	return unavailable(err)
}

// Records implements textmem.Backend.
func (p *Store) Records(ctx context.Context) (map[string][]byte, error) {
	rows, err := p.cubeRows(ctx, true)
	if err != nil {
		return nil, err
	}
	out := make(map[string][]byte, len(rows))
	for _, r := range rows {
		out[r.name] = r.record
	}
	return out, nil
}

// DeleteRecord implements textmem.Backend.
func (p *Store) DeleteRecord(ctx context.Context, cube string) error {
	tag := p.tag(cube)
	return p.bounded(ctx, func(ctx context.Context) error {
		_, err := p.pool.Exec(ctx, `UPDATE memosrt_text_cubes SET record = NULL WHERE tag = $1`, tag)
		return unavailable(err)
	})
}

// MaxKey implements textmem.Backend.
func (p *Store) MaxKey(string) int { return pgMaxKey }
