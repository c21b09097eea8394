package redis

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sync/errgroup"

	goredis "github.com/redis/go-redis/v9"

	"github.com/memosrt/memosrt/kvcache"
)

// Redis keys of the shared level, under a prefix (Options.Prefix):
//
//	<p>h:<id>        record (packRecord JSON, sealed when a key is set)
//	<p>b:<id>        blob, a hash of parts "0", "1", ... of redisPartBytes
//	                 each and "n" (parts) and "len" (bytes), written last:
//	                 one key, so eviction takes the whole blob or none of it
//	<p>c:<chain>     set of the ids indexed under a prefix-chain hash
//	<p>deleted       pub/sub channel: ids deleted by any node
//
// Parts are 1 MiB and a read fetches them over several connections at
// once: Redis's single thread sends one part while Go parses another (a
// 30 MiB blob on loopback: 13 ms in 1 MiB parts fetched 8 at a time, 28 ms
// as one value).
const (
	redisPartBytes = 1 << 20
	redisFetchers  = 8
)

// Options configure Open.
type Options struct {
	// Prefix starts every key (default "memosrt:kv:"): nodes sharing packs
	// use the same one.
	Prefix string
	// DialTimeout bounds connecting (default 500 ms). Requests never wait
	// for a server that is down: the cache's health check finds it down and
	// back (see SharedStats.Up).
	DialTimeout time.Duration
}

// Store is a kvcache.Shared level in a Redis server (github.com/redis/go-redis/v9).
// Eviction is Redis's own (maxmemory-policy); a key it evicted is a miss.
type Store struct {
	c      *goredis.Client
	addr   string
	dial   time.Duration
	prefix string
	// deepest finds the deepest non-empty chain set in one round trip
	deepest *goredis.Script
}

// deepestLua walks KEYS from the last (deepest) to the first and returns
// {index, ids} of the first non-empty set, at most ARGV[1] of its ids.
const deepestLua = `
for i = #KEYS, 1, -1 do
  local n = redis.call('SCARD', KEYS[i])
  if n > 0 then
    return {i - 1, redis.call('SRANDMEMBER', KEYS[i], tonumber(ARGV[1]))}
  end
end
return {-1, {}}
`

// Open connects to the Redis server at url (New) and checks it
// answers PING within the dial timeout. Errors: a bad URL, or no answer.
func Open(ctx context.Context, url string, o Options) (*Store, error) {
	r, err := New(url, o)
	if err != nil {
		return nil, err
	}
	if err := r.Ping(ctx); err != nil {
		r.Close()
		return nil, err
	}
	return r, nil
}

// New returns a client of the Redis server at url
// (redis://[user:pass@]host:port/db or rediss:// for TLS, as goredis.ParseURL
// reads it) without connecting: a server that is down now is reached once
// it is up. Errors: a URL that does not parse.
func New(url string, o Options) (*Store, error) {
	if !strings.HasPrefix(url, "redis://") && !strings.HasPrefix(url, "rediss://") && !strings.HasPrefix(url, "unix://") {
		return nil, fmt.Errorf("kvcache: redis url %q: want redis://HOST:PORT/DB (rediss:// for TLS, unix:///PATH?db=N)", url)
	}
	opt, err := goredis.ParseURL(url)
	if err != nil {
		return nil, fmt.Errorf("kvcache: redis url %q: %w", url, err)
	}
	if o.DialTimeout <= 0 {
		o.DialTimeout = 500 * time.Millisecond
	}
	if o.Prefix == "" {
		o.Prefix = "memosrt:kv:"
	}
	opt.DialTimeout = o.DialTimeout
	opt.MaxRetries = 1
	// a large blob takes longer than go-redis's 3 s default on a slow link;
	// each call carries its own deadline (Options.SharedTimeout)
	opt.ReadTimeout, opt.WriteTimeout = -1, -1
	opt.ContextTimeoutEnabled = true
	return &Store{c: goredis.NewClient(opt), addr: opt.Addr, dial: o.DialTimeout, prefix: o.Prefix,
		deepest: goredis.NewScript(deepestLua)}, nil
}

// Ping checks the server answers.
func (r *Store) Ping(ctx context.Context) error {
	pctx, cancel := context.WithTimeout(ctx, r.dial+time.Second)
	defer cancel()
	if err := r.c.Ping(pctx).Err(); err != nil {
		return fmt.Errorf("kvcache: redis %s: %w", r.addr, refused(err))
	}
	return nil
}

// refused wraps an error the server answered with (WRONGPASS, a database
// index out of range, OOM) in kvcache.ErrSharedRefused; a connection error or a
// timeout is returned as it is.
func refused(err error) error {
	var re goredis.Error
	if err != nil && !errors.Is(err, goredis.Nil) && errors.As(err, &re) {
		return fmt.Errorf("%w: %v", kvcache.ErrSharedRefused, err)
	}
	return err
}

// Close closes the connection pool.
func (r *Store) Close() error { return r.c.Close() }

func (r *Store) rec(id string) string  { return r.prefix + "h:" + id }
func (r *Store) blob(id string) string { return r.prefix + "b:" + id }
func (r *Store) chain(h string) string { return r.prefix + "c:" + h }
func (r *Store) channel() string       { return r.prefix + "deleted" }
func partField(i int) string           { return strconv.Itoa(i) }
func nParts(n int) int                 { return max(1, (n+redisPartBytes-1)/redisPartBytes) }
func part(b []byte, i int) []byte      { return b[i*redisPartBytes : min(len(b), (i+1)*redisPartBytes)] }
func (r *Store) chainKeys(chain []string) []string {
	ks := make([]string, len(chain))
	for i, h := range chain {
		ks[i] = r.chain(h)
	}
	return ks
}

// Put writes the blob's parts, its size, then the record, then the index
// entries, in one pipeline (Redis runs one connection's commands in order).
func (r *Store) Put(ctx context.Context, id string, record, blob []byte, chain []string) error {
	n := nParts(len(blob))
	p := r.c.Pipeline()
	p.Del(ctx, r.blob(id))
	for i := 0; i < n; i++ {
		p.HSet(ctx, r.blob(id), partField(i), part(blob, i))
	}
	p.HSet(ctx, r.blob(id), "n", n, "len", len(blob))
	p.Set(ctx, r.rec(id), record, 0)
	for _, k := range r.chainKeys(chain) {
		p.SAdd(ctx, k, id)
	}
	_, err := p.Exec(ctx)
	return refused(err)
}

// Deepest runs deepestLua.
func (r *Store) Deepest(ctx context.Context, keys []string, maxIDs int) ([]string, int, error) {
	if len(keys) == 0 {
		return nil, -1, nil
	}
	v, err := r.deepest.Run(ctx, r.c, r.chainKeys(keys), maxIDs).Slice()
	if err != nil {
		return nil, -1, refused(err)
	}
	if len(v) != 2 {
		return nil, -1, fmt.Errorf("kvcache: redis: deepest answered %d values", len(v))
	}
	d, _ := v[0].(int64)
	raw, _ := v[1].([]any)
	ids := make([]string, 0, len(raw))
	for _, x := range raw {
		if s, ok := x.(string); ok {
			ids = append(ids, s)
		}
	}
	return ids, int(d), nil
}

// Records is one MGET.
func (r *Store) Records(ctx context.Context, ids []string) ([][]byte, error) {
	ks := make([]string, len(ids))
	for i, id := range ids {
		ks[i] = r.rec(id)
	}
	v, err := r.c.MGet(ctx, ks...).Result()
	if err != nil {
		return nil, refused(err)
	}
	out := make([][]byte, len(v))
	for i, x := range v {
		if s, ok := x.(string); ok {
			out[i] = []byte(s)
		}
	}
	return out, nil
}

// Blob reads the blob's size, then its parts, redisFetchers at a time,
// each into its place. A blob without its size or any part (evicted, or a
// Put that did not finish) is kvcache.ErrNotFound.
func (r *Store) Blob(ctx context.Context, id string) ([]byte, error) {
	key := r.blob(id)
	meta, err := r.c.HMGet(ctx, key, "n", "len").Result()
	if err != nil {
		return nil, refused(err)
	}
	ns, _ := meta[0].(string)
	ls, _ := meta[1].(string)
	n, err1 := strconv.Atoi(ns)
	size, err2 := strconv.Atoi(ls)
	if err1 != nil || err2 != nil || n != nParts(size) || size > kvcache.MaxRawBytes {
		return nil, kvcache.ErrNotFound
	}
	blob := make([]byte, size)
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(redisFetchers)
	for i := 0; i < n; i++ {
		g.Go(func() error {
			v, err := r.c.HGet(gctx, key, partField(i)).Bytes()
			if errors.Is(err, goredis.Nil) {
				return kvcache.ErrNotFound
			}
			if err != nil {
				return refused(err)
			}
			dst := part(blob, i)
			if len(v) != len(dst) {
				return kvcache.ErrNotFound // not this blob's part (a Put replacing it)
			}
			copy(dst, v)
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return nil, err
	}
	return blob, nil
}

// Delete removes the record first (the pack stops being found), then the
// index entries and the blob, and publishes id.
func (r *Store) Delete(ctx context.Context, id string, chain []string) error {
	p := r.c.Pipeline()
	p.Del(ctx, r.rec(id))
	for _, k := range r.chainKeys(chain) {
		p.SRem(ctx, k, id)
	}
	p.Del(ctx, r.blob(id))
	p.Publish(ctx, r.channel(), id)
	_, err := p.Exec(ctx)
	return refused(err)
}

// Watch subscribes to the deletion channel and subscribes again after a
// lost connection (once a second until the server answers), calling gap
// after each new subscription but the first: deletions published while it
// was away are lost.
func (r *Store) Watch(ctx context.Context, fn func(id string), gap func()) {
	for first := true; ctx.Err() == nil; first = false {
		sub := r.c.Subscribe(ctx, r.channel())
		if _, err := sub.Receive(ctx); err == nil { // the subscription's confirmation
			if !first {
				gap()
			}
			for {
				m, err := sub.ReceiveMessage(ctx)
				if err != nil {
					break
				}
				fn(m.Payload)
			}
		} else if first {
			gap() // not subscribed from the start: the next one will say so again
		}
		sub.Close()
		select {
		case <-ctx.Done():
		case <-time.After(time.Second):
		}
	}
}

var _ kvcache.Shared = (*Store)(nil)
