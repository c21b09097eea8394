package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/memosrt/memosrt"
	"github.com/memosrt/memosrt/internal/atomicfile"
	"github.com/memosrt/memosrt/kvcache"
	"github.com/memosrt/memosrt/runtime"
	"github.com/memosrt/memosrt/scheduler"
	"github.com/memosrt/memosrt/server"
	"github.com/memosrt/memosrt/textmem"
)

// serveFile is where `memosrt serve` records, in its data directory, how
// CLI commands on that directory reach it (Badger lets one process open
// the directory, so they talk to the server instead).
const serveFile = "serve.json"

// serveInfo is the content of serveFile. The file is 0600 inside the data
// directory: whoever may read it may already read the data.
type serveInfo struct {
	URL   string `json:"url"`   // http://HOST:PORT
	Token string `json:"token"` // bearer token the server accepts (server.Options.LocalToken)
	// Instance is the id the server reports on GET /v1/server
	// (server.Options.Instance): another server later on the same address
	// is not taken for this one.
	Instance string `json:"instance"`
	PID      int    `json:"pid"`
}

// publishServe writes serveFile for a server listening on addr and returns
// what it recorded and a cleanup that removes the file.
func publishServe(dir, addr string) (serveInfo, func(), error) {
	secret := func() string {
		var b [16]byte
		rand.Read(b[:])
		return hex.EncodeToString(b[:])
	}
	info := serveInfo{URL: "http://" + addr, Token: secret(), Instance: secret(), PID: os.Getpid()}
	js, _ := json.Marshal(info)
	path := filepath.Join(dir, serveFile)
	if err := atomicfile.Write(path, 0o600, func(f *os.File) error { _, err := f.Write(js); return err }); err != nil {
		return serveInfo{}, nil, fmt.Errorf("record %s: %w", path, err)
	}
	return info, func() { os.Remove(path) }, nil
}

// remote is a running `memosrt serve` on the data directory, reached over
// HTTP. It offers what the CLI's commands need (see dirBackend).
type remote struct {
	info serveInfo
	c    *http.Client
	// model is the served model that answers Generate and Warm (a name
	// GET /api/tags lists); "" is the server's primary (useModel).
	model string
}

// useModel makes the server's model that is the GGUF file at path (the same
// runtime.Fingerprint) answer this client's requests. It returns the name
// of the server's primary model and whether the server serves that file.
func (r *remote) useModel(ctx context.Context, path string) (primary string, ok bool, err error) {
	fp, err := runtime.Fingerprint(path)
	if err != nil {
		return "", false, err
	}
	var tags struct {
		Models []struct{ Name, Digest string }
	}
	if err := r.do(ctx, "GET", "/api/tags", nil, &tags); err != nil {
		return "", false, err
	}
	for i, m := range tags.Models {
		if i == 0 {
			primary = m.Name
		}
		if m.Digest == fp {
			if i > 0 {
				r.model = m.Name
			}
			return primary, true, nil
		}
	}
	return primary, false, nil
}

// runningServer returns the server recorded in dir when it answers.
func runningServer(dir string) (*remote, bool) {
	b, err := os.ReadFile(filepath.Join(dir, serveFile))
	if err != nil {
		return nil, false
	}
	var info serveInfo
	if json.Unmarshal(b, &info) != nil || info.URL == "" {
		return nil, false
	}
	r := &remote{info: info, c: &http.Client{}}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	var got struct {
		Instance string `json:"instance"`
	}
	if err := r.do(ctx, "GET", "/v1/server", nil, &got); err != nil || got.Instance != info.Instance {
		return nil, false // a stale file: the server is gone, or another one took its address
	}
	return r, true
}

// do sends a JSON request and decodes a JSON answer into out (nil: none).
func (r *remote) do(ctx context.Context, method, path string, in, out any) error {
	resp, err := r.send(ctx, method, path, in)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if out == nil {
		io.Copy(io.Discard, resp.Body)
		return nil
	}
	return json.NewDecoder(resp.Body).Decode(out)
}

func (r *remote) send(ctx context.Context, method, path string, in any) (*http.Response, error) {
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return nil, err
		}
		body = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, r.info.URL+path, body)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Authorization", "Bearer "+r.info.Token)
	if in != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := r.c.Do(req)
	if err != nil {
		return nil, fmt.Errorf("memosrt serve at %s: %w", r.info.URL, err)
	}
	if resp.StatusCode >= 300 {
		defer resp.Body.Close()
		return nil, remoteError(resp)
	}
	return resp, nil
}

// remoteError turns an error answer into the server's message.
func remoteError(resp *http.Response) error {
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	var e struct {
		Error json.RawMessage `json:"error"`
	}
	msg := strings.TrimSpace(string(b))
	if json.Unmarshal(b, &e) == nil && len(e.Error) > 0 {
		var s string
		var o struct {
			Message string `json:"message"`
		}
		if json.Unmarshal(e.Error, &s) == nil {
			msg = s
		} else if json.Unmarshal(e.Error, &o) == nil && o.Message != "" {
			msg = o.Message
		}
	}
	return fmt.Errorf("%s (HTTP %d from the running server)", msg, resp.StatusCode)
}

func (r *remote) Close(context.Context) error { return nil }

func cubePath(cube string) string { return "/v1/cubes/" + url.PathEscape(cube) }

func (r *remote) AddMemory(ctx context.Context, cube string, m textmem.Memory) (textmem.Memory, error) {
	var out textmem.Memory
	in := map[string]any{"text": m.Text, "kind": m.Kind, "tags": m.Tags, "source": m.Source}
	err := r.do(ctx, "POST", cubePath(cube)+"/memories", in, &out)
	return out, err
}

func (r *remote) Memories(ctx context.Context, cube string) ([]textmem.Memory, error) {
	var out struct {
		Memories []textmem.Memory `json:"memories"`
	}
	err := r.do(ctx, "GET", cubePath(cube)+"/memories", nil, &out)
	if err != nil && strings.Contains(err.Error(), "HTTP 404") && strings.Contains(err.Error(), "unknown cube") {
		return nil, nil // as the store lists an unknown cube: empty
	}
	return out.Memories, err
}

func (r *remote) Search(ctx context.Context, cube string, q textmem.Query) ([]textmem.Hit, error) {
	var out struct {
		Hits []textmem.Hit `json:"hits"`
	}
	turns := !slices.Contains(q.NotKinds, memosrt.KindTurn) // memosrt.SearchQuery's choice
	err := r.do(ctx, "POST", cubePath(cube)+"/search", map[string]any{"query": q.Text, "k": q.K, "include_turns": turns}, &out)
	return out.Hits, err
}

func (r *remote) DeleteMemory(ctx context.Context, cube, id string) error {
	return r.do(ctx, "DELETE", cubePath(cube)+"/memories/"+url.PathEscape(id), nil, nil)
}

func (r *remote) AllPacks(ctx context.Context) ([]kvcache.Info, error) {
	var out struct {
		Packs []kvcache.Info `json:"packs"`
	}
	err := r.do(ctx, "GET", "/v1/packs", nil, &out)
	return out.Packs, err
}

func (r *remote) Tiers(ctx context.Context, cube string, limit int) (scheduler.CubeTiers, error) {
	var out scheduler.CubeTiers
	err := r.do(ctx, "GET", fmt.Sprintf("%s/tiers?limit=%d", cubePath(cube), limit), nil, &out)
	return out, err
}

func (r *remote) Tick(ctx context.Context) (scheduler.TickReport, error) {
	var out struct{ Planned, Done, Failed int }
	err := r.do(ctx, "POST", "/v1/tiers/tick", nil, &out)
	return scheduler.TickReport{Planned: out.Planned, Done: out.Done, Failed: out.Failed}, err
}

func (r *remote) Warm(ctx context.Context, cube string, wo memosrt.WarmOptions) (memosrt.PackStatus, error) {
	var out memosrt.PackStatus
	if r.model != "" {
		return out, fmt.Errorf("memosrt serve at %s warms packs with its primary model only, not %s: kv warm without --model", r.info.URL, r.model)
	}
	err := r.do(ctx, "POST", cubePath(cube)+"/pack", map[string]bool{"resident": wo.Resident}, &out)
	return out, err
}

// Generate runs req on the server (POST /v1/generate), streaming text to
// req.OnText.
func (r *remote) Generate(ctx context.Context, req memosrt.Request) (*memosrt.Response, error) {
	model := req.Model
	if model == "" {
		model = r.model
	}
	in := server.NativeRequest{Model: model, Cube: req.Cube, Prompt: req.Prompt, NumPredict: req.NumPredict, NumCtx: req.NumCtx,
		Stop: req.Stop, NoCache: req.NoCache, Stream: true,
		Sampling: server.NativeSampling{Temperature: req.Sampling.Temperature, TopK: req.Sampling.TopK, TopP: req.Sampling.TopP,
			MinP: req.Sampling.MinP, RepeatPenalty: req.Sampling.RepeatPenalty, RepeatLastN: req.Sampling.RepeatLastN,
			Seed: req.Sampling.Seed, Grammar: req.Sampling.Grammar}}
	if req.Adapters != nil {
		var parts []string
		for _, s := range req.Adapters {
			parts = append(parts, s.String())
		}
		a := strings.Join(parts, ",")
		if a == "" {
			a = "none"
		}
		in.Adapters = &a
	}
	resp, err := r.send(ctx, "POST", "/v1/generate", in)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 0, 64<<10), 64<<20)
	var text strings.Builder
	for sc.Scan() {
		var ch server.NativeChunk
		if err := json.Unmarshal(sc.Bytes(), &ch); err != nil {
			return nil, fmt.Errorf("memosrt serve: bad stream line: %w", err)
		}
		switch {
		case ch.Error != "":
			return nil, errors.New(ch.Error)
		case ch.Done && ch.Response != nil:
			ch.Response.Text = text.String()
			return ch.Response, nil
		}
		text.WriteString(ch.Text)
		if req.OnText != nil {
			if err := req.OnText(ch.Text); err != nil {
				return nil, err
			}
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	return nil, errors.New("memosrt serve: the stream ended before its last line")
}
