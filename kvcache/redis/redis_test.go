package redis_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/memosrt/memosrt/internal/testenv"
	"github.com/memosrt/memosrt/kvcache"
	"github.com/memosrt/memosrt/kvcache/redis"

	"github.com/memosrt/memosrt/internal/testutil"
	"github.com/memosrt/memosrt/runtime"
)

// node is one memosrt node's activation tier: its own Badger, its own
// connection to the shared Redis.
type node struct {
	cache *kvcache.Cache
	r     *redis.Store
}

func openNode(t *testing.T, url string, key []byte) *node {
	return openNodeMax(t, url, key, 0)
}

func openNodeMax(t *testing.T, url string, key []byte, maxRemote int) *node {
	t.Helper()
	r, err := redis.Open(context.Background(), url, redis.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	c, err := kvcache.Open(testenv.DB(t, t.TempDir()), kvcache.Options{Shared: r, SharedKey: key, SharedTimeout: time.Second, SharedMaxRemote: maxRemote})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return &node{cache: c, r: r}
}

// sharedPrompt returns a pack of n tokens (more than one chain block) and a
// request extending it.
func sharedPrompt(t *testing.T, e *runtime.Engine, text string, n int) (pack, req []int32) {
	t.Helper()
	toks, err := e.Tokenize(strings.Repeat(text, 40), true)
	if err != nil || len(toks) < n+8 {
		t.Fatalf("%d tokens, %v", len(toks), err)
	}
	return toks[:n], toks[:n+8]
}

// gen greedily generates 16 tokens from toks on seq, whose first npast
// positions are held.
func gen(t *testing.T, e *runtime.Engine, seq int, toks []int32, npast int) string {
	t.Helper()
	r, err := e.Generate(context.Background(), runtime.Request{Seq: seq, Tokens: toks, NPast: npast, MaxTokens: 16})
	if err != nil {
		t.Fatal(err)
	}
	return r.Text
}

func TestSharedRedis(t *testing.T) {
	srv := testutil.StartRedis(t, 0)
	e := testenv.Engine(t, runtime.Options{})
	ctx := context.Background()
	a, b := openNode(t, srv.URL(), nil), openNode(t, srv.URL(), nil)
	cfg := kvcache.ScopedKey(kvcache.ConfigKey(e.KVConfig(), ""), "cube")
	pack, req := sharedPrompt(t, e, "Lily had a small dog named Max. Max liked to run in the garden. ", 150)

	e.ClearSeq(0)
	coldText := gen(t, e, 0, req, 0)
	info, err := a.cache.Warm(ctx, e, 0, pack, kvcache.WarmOptions{Label: "cube", Scope: "cube"})
	if err != nil {
		t.Fatal(err)
	}
	want, err := e.SaveSeq(0)
	if err != nil {
		t.Fatal(err)
	}
	if st := a.cache.SharedStats(); !st.Enabled || !st.Up || st.Puts != 1 {
		t.Fatalf("node A shared stats %+v, want 1 put", st)
	}

	// node B has nothing of its own and finds A's pack in Redis: the state
	// it restores is byte for byte the one A stored
	if m := b.cache.Lookup(cfg, req); m.ID != info.ID || m.Tokens != len(pack) {
		t.Fatalf("node B lookup %+v, want %s/%d", m, info.ID[:12], len(pack))
	}
	if bi, ok := b.cache.Info(info.ID); !ok || !bi.Remote {
		t.Fatalf("node B info %+v %v, want a remote pack", bi, ok)
	}
	if _, disk, _ := b.cache.Stats(); disk != 0 {
		t.Fatalf("node B counts %d disk bytes for a pack it does not store", disk)
	}
	e.ClearSeq(1)
	r, err := b.cache.Restore(ctx, e, 1, req, kvcache.RestoreOptions{Scope: "cube"})
	if err != nil || r.Refused != nil || r.Tokens != len(pack) || r.PackID != info.ID || r.FromRAM {
		t.Fatalf("node B restore %+v, %v, refused %v", r, err, r.Refused)
	}
	if got := gen(t, e, 1, req, r.Tokens); got != coldText {
		t.Fatalf("node B restored output %q, cold %q", got, coldText)
	}
	b.cache.DropRAM()
	if _, got, _, err := b.cache.State(info.ID); err != nil || !bytes.Equal(got, want) {
		t.Fatalf("node B's state of the pack differs from node A's (%d vs %d bytes, %v)", len(got), len(want), err)
	}
	if st := b.cache.SharedStats(); st.Hits != 2 || st.Errors != 0 {
		t.Fatalf("node B shared stats %+v, want 2 hits (the restore, the state read)", st)
	}
	// other scopes and configs never see it
	if m := b.cache.Lookup(kvcache.ScopedKey(kvcache.ConfigKey(e.KVConfig(), ""), "other"), req); m.ID != "" {
		t.Fatalf("found across cubes: %+v", m)
	}

	// a node deleting the pack removes it from every node's index
	if err := a.cache.Delete(info.ID); err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, "node B to drop the deleted pack", func() bool { _, ok := b.cache.Info(info.ID); return !ok })
	if st := b.cache.SharedStats(); st.Deletes != 1 {
		t.Fatalf("node B deletes %d, want 1", st.Deletes)
	}
	if m := b.cache.Lookup(cfg, req); m.ID != "" {
		t.Fatalf("deleted pack still found: %+v", m)
	}

	// a blob Redis evicted is a miss, never an error, and A keeps its pack
	pack2, req2 := sharedPrompt(t, e, "The sun was warm and the sky was blue over the hill. ", 140)
	info2, err := a.cache.Warm(ctx, e, 0, pack2, kvcache.WarmOptions{Label: "cube", Scope: "cube"})
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Do("DEL memosrt:kv:b:"+info2.ID, ":1"); err != nil {
		t.Fatal(err)
	}
	r, err = b.cache.Restore(ctx, e, 1, req2, kvcache.RestoreOptions{Scope: "cube"})
	if err != nil || r.Refused != nil || r.Tokens != 0 {
		t.Fatalf("evicted blob: restore %+v, %v, refused %v; want a plain miss", r, err, r.Refused)
	}
	if st := b.cache.SharedStats(); st.Misses != 1 || st.Errors != 0 {
		t.Fatalf("node B shared stats %+v, want 1 miss, no error", st)
	}
	if _, ok := a.cache.Info(info2.ID); !ok {
		t.Fatal("node A lost its pack when Redis evicted the shared copy")
	}
	r, err = a.cache.Restore(ctx, e, 0, req2, kvcache.RestoreOptions{Scope: "cube"})
	if err != nil || r.Tokens != len(pack2) {
		t.Fatalf("node A restore of its own pack %+v, %v", r, err)
	}

	// Redis down: the health check says so without any traffic; both
	// nodes answer from their own levels and store locally
	srv.Kill()
	testutil.WaitFor(t, "node A's health check to see Redis down", func() bool { return !a.cache.SharedStats().Up })
	pack3, req3 := sharedPrompt(t, e, "Tom found a red ball under the old tree by the river. ", 130)
	info3, err := b.cache.Warm(ctx, e, 1, pack3, kvcache.WarmOptions{Label: "cube", Scope: "cube"})
	if err != nil {
		t.Fatalf("warm with Redis down: %v", err)
	}
	if st := b.cache.SharedStats(); st.Up || st.Errors == 0 {
		t.Fatalf("node B shared stats with Redis down %+v, want down with errors", st)
	}
	// a down level is not tried by requests (only by the health check)
	errs := a.cache.SharedStats().Errors
	for i := 0; i < 5; i++ {
		a.cache.Lookup(cfg, req3)
	}
	if st := a.cache.SharedStats(); st.Errors > errs+1 { // one health check may fail meanwhile
		t.Fatalf("lookups tried a down Redis: errors %d → %d", errs, st.Errors)
	}
	if m := b.cache.Lookup(cfg, req3); m.ID != info3.ID {
		t.Fatalf("node B's own pack not found with Redis down: %+v", m)
	}
	if m := a.cache.Lookup(cfg, req3); m.ID == info3.ID || m.Tokens > 1 {
		t.Fatalf("node A found %+v with Redis down (its own packs share the BOS token only)", m)
	}
	// back up (empty: no persistence): sharing resumes on its own after
	// the retry pause
	srv.Start()
	testutil.WaitFor(t, "node A's shared level up", func() bool { return a.cache.SharedStats().Up })
	// both listen for deletions again, having forgotten what they may have missed
	testutil.WaitFor(t, "node B to resubscribe", func() bool { return b.cache.SharedStats().Gaps == 1 })
	pack4, req4 := sharedPrompt(t, e, "A little bird sang a song to the moon every night. ", 135)
	info4, err := a.cache.Warm(ctx, e, 0, pack4, kvcache.WarmOptions{Label: "cube", Scope: "cube"})
	if err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, "node B's shared level up", func() bool { return b.cache.SharedStats().Up })
	if m := b.cache.Lookup(cfg, req4); m.ID != info4.ID || m.Tokens != len(pack4) {
		t.Fatalf("after Redis came back, node B lookup %+v, want %s", m, info4.ID[:12])
	}
	// node B's pack of the outage was written to Redis once it came back
	testutil.WaitFor(t, "node B's outage pack to reach Redis", func() bool { return a.cache.Lookup(cfg, req3).ID == info3.ID })
	// the deletion channel resubscribed on its own
	deletes := b.cache.SharedStats().Deletes
	if err := a.cache.Delete(info4.ID); err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, "node B to drop a pack deleted after Redis came back", func() bool { _, ok := b.cache.Info(info4.ID); return !ok })
	if st := b.cache.SharedStats(); st.Deletes != deletes+1 {
		t.Fatalf("node B deletes %d, want %d", st.Deletes, deletes+1)
	}
}

func TestSharedEncrypted(t *testing.T) {
	srv := testutil.StartRedis(t, 0)
	e := testenv.Engine(t, runtime.Options{})
	ctx := context.Background()
	key := bytes.Repeat([]byte{7}, 32)
	a, b := openNode(t, srv.URL(), key), openNode(t, srv.URL(), key)
	plain, other := openNode(t, srv.URL(), nil), openNode(t, srv.URL(), bytes.Repeat([]byte{9}, 32))
	cfg := kvcache.ScopedKey(kvcache.ConfigKey(e.KVConfig(), ""), "cube")
	pack, req := sharedPrompt(t, e, "Lily had a small dog named Max. Max liked to run in the garden. ", 150)
	info, err := a.cache.Warm(ctx, e, 0, pack, kvcache.WarmOptions{Label: "cube", Scope: "cube"})
	if err != nil {
		t.Fatal(err)
	}
	want, _ := e.SaveSeq(0)

	// nothing readable leaves the node: the record is no JSON, and neither
	// the record nor the blob holds the header's text
	rc := goredis.NewClient(&goredis.Options{Addr: fmt.Sprintf("127.0.0.1:%d", srv.Port)})
	defer rc.Close()
	// the key's namespace, found as the one record of the pack under the prefix
	found, err := rc.Keys(ctx, "memosrt:kv:h:*"+info.ID).Result()
	if err != nil || len(found) != 1 || found[0] == "memosrt:kv:h:"+info.ID {
		t.Fatalf("records of pack %s: %q (%v), want one under a namespace", info.ID, found, err)
	}
	ns := strings.TrimSuffix(strings.TrimPrefix(found[0], "memosrt:kv:h:"), info.ID)
	rec, err := rc.Get(ctx, "memosrt:kv:h:"+ns+info.ID).Bytes()
	if err != nil {
		t.Fatal(err)
	}
	blob, err := rc.HGet(ctx, "memosrt:kv:b:"+ns+info.ID, "0").Bytes()
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range [][]byte{rec, blob} {
		if bytes.Contains(v, []byte(`"tokens"`)) || bytes.Contains(v, []byte("MKVB")) || bytes.Contains(v, []byte(`"label"`)) {
			t.Fatal("a shared value holds plaintext")
		}
	}

	e.ClearSeq(1)
	r, err := b.cache.Restore(ctx, e, 1, req, kvcache.RestoreOptions{Scope: "cube"})
	if err != nil || r.Tokens != len(pack) {
		t.Fatalf("node B (same key) restore %+v, %v", r, err)
	}
	b.cache.DropRAM()
	if _, got, _, err := b.cache.State(info.ID); err != nil || !bytes.Equal(got, want) {
		t.Fatalf("node B's state differs from node A's (%v)", err)
	}
	// nodes without the key, or with another, miss, delete nothing, and
	// storing the same pack themselves overwrites nothing of node A's: each
	// key has its own namespace
	for name, n := range map[string]*node{"no key": plain, "other key": other} {
		if m := n.cache.Lookup(cfg, req); m.Tokens > 1 {
			t.Fatalf("%s: found %+v", name, m)
		}
		if _, err := n.cache.Warm(ctx, e, 1, pack, kvcache.WarmOptions{Label: "cube", Scope: "cube"}); err != nil {
			t.Fatal(err)
		}
	}
	if n, err := rc.Exists(ctx, "memosrt:kv:h:"+ns+info.ID, "memosrt:kv:b:"+ns+info.ID, "memosrt:kv:h:"+info.ID).Result(); err != nil || n != 3 {
		t.Fatalf("%d of node A's record and blob and the plain node's record (%v)", n, err)
	}
	fresh := openNode(t, srv.URL(), key)
	if r, err := fresh.cache.Restore(ctx, e, 1, req, kvcache.RestoreOptions{Scope: "cube"}); err != nil || r.Tokens != len(pack) {
		t.Fatalf("a fresh node with node A's key: %+v, %v", r, err)
	}
}

// A node keeps at most SharedMaxRemote records of other nodes' packs in its index
// (oldest found forgotten first), and finds a forgotten one again.
func TestSharedRemoteBound(t *testing.T) {
	srv := testutil.StartRedis(t, 0)
	ctx := context.Background()
	a, b := openNode(t, srv.URL(), nil), openNodeMax(t, srv.URL(), nil, 2)
	kv := runtime.KVConfig{ModelFingerprint: "f", NLayer: 1, TypeK: "f16", TypeV: "f16", NStream: 1}
	cfg := kvcache.ConfigKey(kv, "")
	var reqs [][]int32
	var ids []string
	for i := 0; i < 3; i++ {
		toks := make([]int32, 130)
		for j := range toks {
			toks[j] = int32(1 + i*1000 + j)
		}
		info, err := a.cache.Put(ctx, kvcache.Header{KV: kv, Tokens: toks}, bytes.Repeat([]byte{byte(i)}, 4096))
		if err != nil {
			t.Fatal(err)
		}
		reqs, ids = append(reqs, append(toks, 7)), append(ids, info.ID)
	}
	for i, req := range reqs {
		if m := b.cache.Lookup(cfg, req); m.ID != ids[i] || m.Tokens != 130 {
			t.Fatalf("pack %d: %+v", i, m)
		}
	}
	_, ok0 := b.cache.Info(ids[0])
	_, ok1 := b.cache.Info(ids[1])
	_, ok2 := b.cache.Info(ids[2])
	if ok0 || !ok1 || !ok2 {
		t.Fatalf("node B holds %v %v %v, want the last two", ok0, ok1, ok2)
	}
	if m := b.cache.Lookup(cfg, reqs[0]); m.ID != ids[0] {
		t.Fatalf("forgotten pack not found again: %+v", m)
	}
	if _, ok := b.cache.Info(ids[1]); ok {
		t.Fatal("the bound did not hold after the pack was found again")
	}
	if _, _, n := b.cache.Stats(); n != 0 {
		t.Fatalf("node B counts %d packs of its own", n)
	}
	if l := b.cache.List(""); len(l) != 0 {
		t.Fatalf("node B lists %d packs of other nodes", len(l))
	}
}

// A blob of several Redis parts reads back byte for byte; one with a part
// gone is a miss.
func TestSharedMultiPart(t *testing.T) {
	srv := testutil.StartRedis(t, 0)
	ctx := context.Background()
	a, b := openNode(t, srv.URL(), nil), openNode(t, srv.URL(), nil)
	kv := runtime.KVConfig{ModelFingerprint: "f", NLayer: 1, TypeK: "f16", TypeV: "f16", NStream: 1}
	toks := make([]int32, 70)
	for i := range toks {
		toks[i] = int32(i + 1)
	}
	state := make([]byte, 5*(1<<20)/2) // incompressible: 3 parts
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range state {
		state[i] = byte(rng.Uint32())
	}
	info, err := a.cache.Put(ctx, kvcache.Header{KV: kv, Tokens: toks}, state)
	if err != nil {
		t.Fatal(err)
	}
	if m := b.cache.Lookup(kvcache.ConfigKey(kv, ""), append(toks, 1)); m.ID != info.ID {
		t.Fatalf("lookup %+v", m)
	}
	_, got, fromRAM, err := b.cache.State(info.ID)
	if err != nil || fromRAM || !bytes.Equal(got, state) {
		t.Fatalf("state: %v, fromRAM %v, equal %v", err, fromRAM, bytes.Equal(got, state))
	}
	n, err := goredis.NewClient(&goredis.Options{Addr: fmt.Sprintf("127.0.0.1:%d", srv.Port)}).HGet(ctx, "memosrt:kv:b:"+info.ID, "n").Int()
	if err != nil || n != 3 {
		t.Fatalf("%d parts (%v), want 3", n, err)
	}
	if err := srv.Do("HDEL memosrt:kv:b:"+info.ID+" 1", ":1"); err != nil {
		t.Fatal(err)
	}
	b.cache.DropRAM()
	if _, _, _, err := b.cache.State(info.ID); !errors.Is(err, kvcache.ErrNotFound) {
		t.Fatalf("a blob missing a part: %v, want kvcache.ErrNotFound", err)
	}
}

// A store that refuses (a database index it does not have) is
// kvcache.ErrSharedRefused, which serve takes as a setting that can never work; a
// store that accepts connections and never answers costs one short
// timeout, then the level is down and requests do not wait on it.
func TestSharedRefusedAndHung(t *testing.T) {
	srv := testutil.StartRedis(t, 0)
	if _, err := redis.Open(context.Background(), fmt.Sprintf("redis://127.0.0.1:%d/99", srv.Port), redis.Options{}); !errors.Is(err, kvcache.ErrSharedRefused) {
		t.Fatalf("database 99: %v, want kvcache.ErrSharedRefused", err)
	}
	for _, bad := range []string{"not a url", "http://127.0.0.1:1", "127.0.0.1:6379"} {
		if _, err := redis.New(bad, redis.Options{}); err == nil || !strings.Contains(err.Error(), "want redis://") {
			t.Fatalf("%q: %v", bad, err)
		}
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go func() { // accept and never answer
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			defer c.Close()
		}
	}()
	r, err := redis.New("redis://"+l.Addr().String()+"/0", redis.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	c, err := kvcache.Open(testenv.DB(t, t.TempDir()), kvcache.Options{Shared: r})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	st := c.SharedStats()
	if st.Up || st.Errors != 1 {
		t.Fatalf("hung store after Open: %+v, want down after one error", st)
	}
	kv := runtime.KVConfig{ModelFingerprint: "f", NLayer: 1, TypeK: "f16", TypeV: "f16", NStream: 1}
	toks := make([]int32, 200)
	if _, err := c.Put(context.Background(), kvcache.Header{KV: kv, Tokens: toks}, make([]byte, 1000)); err != nil {
		t.Fatalf("put with a hung store: %v", err)
	}
	if m := c.Lookup(kvcache.ConfigKey(kv, ""), append(toks, 1)); m.Tokens != 200 {
		t.Fatalf("own pack with a hung store: %+v", m)
	}
	if got := c.SharedStats(); got.Errors > st.Errors+1 || got.Puts != 0 {
		t.Fatalf("requests tried the hung store: %+v", got)
	}
}
