package serveclient

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

// File is where `memosrt serve` records, in its data directory, how CLI
// commands on that directory reach it.
const File = "serve.json"

// Info is the content of File. The file is 0600 inside the data
// directory: whoever may read it may already read the data.
type Info struct {
	URL   string `json:"url"`   // http://HOST:PORT
	Token string `json:"token"` // bearer token the server accepts (server.Options.LocalToken)
	// Instance is the id the server reports on GET /v1/server
	// (server.Options.Instance): another server later on the same address
	// is not taken for this one.
	Instance string `json:"instance"`
	PID      int    `json:"pid"`
}

// Publish writes File in dir for a server listening on addr, with a new
// random token and instance id, and returns what it recorded and a cleanup
// that removes the file. Errors: the file's write error, naming it.
func Publish(dir, addr string) (Info, func(), error) {
	secret := func() string {
		var b [16]byte
		rand.Read(b[:])
		return hex.EncodeToString(b[:])
	}
	info := Info{URL: "http://" + addr, Token: secret(), Instance: secret(), PID: os.Getpid()}
	js, _ := json.Marshal(info)
	path := filepath.Join(dir, File)
	if err := atomicfile.Write(path, 0o600, func(f *os.File) error { _, err := f.Write(js); return err }); err != nil {
		return Info{}, nil, fmt.Errorf("record %s: %w", path, err)
	}
	return info, func() { os.Remove(path) }, nil
}

// Client is a running `memosrt serve` on a data directory, reached over
// HTTP with the local token it recorded.
type Client struct {
	info Info
	c    *http.Client
	// model is the served model that answers Generate and Warm (a name
	// GET /api/tags lists); "" is the server's primary (UseModel).
	model string
}

// UseModel makes the server's model that is the GGUF file at path (the same
// runtime.Fingerprint) answer this client's requests. It returns the name
// of the server's primary model and whether the server serves that file.
func (r *Client) UseModel(ctx context.Context, path string) (primary string, ok bool, err error) {
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

// Find returns a Client of the server recorded in dir when it answers
// within 2 s with the instance id recorded (a stale file, of a server gone
// or of another one on its address since, is ignored).
func Find(dir string) (*Client, bool) {
	b, err := os.ReadFile(filepath.Join(dir, File))
	if err != nil {
		return nil, false
	}
	var info Info
	if json.Unmarshal(b, &info) != nil || info.URL == "" {
		return nil, false
	}
	r := &Client{info: info, c: &http.Client{}}
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
func (r *Client) do(ctx context.Context, method, path string, in, out any) error {
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

// send sends a JSON request (in nil: no body) and returns the answer of a
// status below 300; other answers become errors (remoteError).
func (r *Client) send(ctx context.Context, method, path string, in any) (*http.Response, error) {
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

// URL is the server's base URL, http://HOST:PORT.
func (r *Client) URL() string { return r.info.URL }

// Close does nothing (a Client holds no connection of its own); it makes a
// Client a stand-in for a memosrt.OS.
func (r *Client) Close(context.Context) error { return nil }

func cubePath(cube string) string { return "/v1/cubes/" + url.PathEscape(cube) }

// AddMemory adds m to cube (POST /v1/cubes/{cube}/memories).
func (r *Client) AddMemory(ctx context.Context, cube string, m textmem.Memory) (textmem.Memory, error) {
	var out textmem.Memory
	in := map[string]any{"text": m.Text, "kind": m.Kind, "tags": m.Tags, "source": m.Source}
	err := r.do(ctx, "POST", cubePath(cube)+"/memories", in, &out)
	return out, err
}

// Memories lists cube's memories; none for an unknown cube, as the store
// lists it.
func (r *Client) Memories(ctx context.Context, cube string) ([]textmem.Memory, error) {
	var out struct {
		Memories []textmem.Memory `json:"memories"`
	}
	err := r.do(ctx, "GET", cubePath(cube)+"/memories", nil, &out)
	if err != nil && strings.Contains(err.Error(), "HTTP 404") && strings.Contains(err.Error(), "unknown cube") {
		return nil, nil // as the store lists an unknown cube: empty
	}
	return out.Memories, err
}

// Search searches cube with q's text, K and whether it leaves out
// recorded turns (memosrt.SearchQuery's choice).
func (r *Client) Search(ctx context.Context, cube string, q textmem.Query) ([]textmem.Hit, error) {
	var out struct {
		Hits []textmem.Hit `json:"hits"`
	}
	turns := !slices.Contains(q.NotKinds, memosrt.KindTurn) // memosrt.SearchQuery's choice
	err := r.do(ctx, "POST", cubePath(cube)+"/search", map[string]any{"query": q.Text, "k": q.K, "include_turns": turns}, &out)
	return out.Hits, err
}

// DeleteMemory deletes memory id of cube.
func (r *Client) DeleteMemory(ctx context.Context, cube, id string) error {
	return r.do(ctx, "DELETE", cubePath(cube)+"/memories/"+url.PathEscape(id), nil, nil)
}

// AllPacks lists every stored pack (GET /v1/packs).
func (r *Client) AllPacks(ctx context.Context) ([]kvcache.Info, error) {
	var out struct {
		Packs []kvcache.Info `json:"packs"`
	}
	err := r.do(ctx, "GET", "/v1/packs", nil, &out)
	return out.Packs, err
}

// Tiers returns cube's tier state with the last limit transitions.
func (r *Client) Tiers(ctx context.Context, cube string, limit int) (scheduler.CubeTiers, error) {
	var out scheduler.CubeTiers
	err := r.do(ctx, "GET", fmt.Sprintf("%s/tiers?limit=%d", cubePath(cube), limit), nil, &out)
	return out, err
}

// Tick runs one scheduler tick now (POST /v1/tiers/tick).
func (r *Client) Tick(ctx context.Context) (scheduler.TickReport, error) {
	var out struct{ Planned, Done, Failed int }
	err := r.do(ctx, "POST", "/v1/tiers/tick", nil, &out)
	return scheduler.TickReport{Planned: out.Planned, Done: out.Done, Failed: out.Failed}, err
}

// Warm warms cube's pack with the server's primary model; an error when
// UseModel chose another.
func (r *Client) Warm(ctx context.Context, cube string, wo memosrt.WarmOptions) (memosrt.PackStatus, error) {
	var out memosrt.PackStatus
	if r.model != "" {
		return out, fmt.Errorf("memosrt serve at %s warms packs with its primary model only, not %s: kv warm without --model", r.info.URL, r.model)
	}
	err := r.do(ctx, "POST", cubePath(cube)+"/pack", map[string]bool{"resident": wo.Resident}, &out)
	return out, err
}

// Generate runs req on the server (POST /v1/generate), streaming text to
// req.OnText.
func (r *Client) Generate(ctx context.Context, req memosrt.Request) (*memosrt.Response, error) {
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

// The keys of the server, over its /v1/keys and share routes.

// CreateKey makes an access key of spec and returns it with its token.
func (r *Client) CreateKey(ctx context.Context, spec memosrt.KeySpec) (memosrt.AccessKey, string, error) {
	in := map[string]any{"name": spec.Name}
	var cubes []map[string]string
	for _, g := range spec.Grants {
		cubes = append(cubes, map[string]string{"cube": g.Cube, "right": string(g.Right)})
	}
	in["cubes"] = cubes
	if spec.ExpiresIn > 0 {
		in["expires_in"] = int64((spec.ExpiresIn + time.Second - 1) / time.Second)
	}
	if !spec.Expires.IsZero() {
		in["expires_at"] = spec.Expires
	}
	var out struct {
		memosrt.AccessKey
		Token string `json:"token"`
	}
	err := r.do(ctx, "POST", "/v1/keys", in, &out)
	return out.AccessKey, out.Token, err
}

// Keys lists the access keys, oldest first.
func (r *Client) Keys(ctx context.Context) ([]memosrt.AccessKey, error) {
	var out struct {
		Keys []memosrt.AccessKey `json:"keys"`
	}
	err := r.do(ctx, "GET", "/v1/keys", nil, &out)
	return out.Keys, err
}

// RevokeKey deletes the access key with id.
func (r *Client) RevokeKey(ctx context.Context, id string) error {
	return r.do(ctx, "DELETE", "/v1/keys/"+url.PathEscape(id), nil, nil)
}

// ShareCube gives the key with id right on cube.
func (r *Client) ShareCube(ctx context.Context, cube, id string, right memosrt.KeyRight) (memosrt.AccessKey, error) {
	var out memosrt.AccessKey
	err := r.do(ctx, "POST", cubePath(cube)+"/share", map[string]string{"key_id": id, "right": string(right)}, &out)
	return out, err
}

// UnshareCube takes cube from the key with id.
func (r *Client) UnshareCube(ctx context.Context, cube, id string) (memosrt.AccessKey, error) {
	var out memosrt.AccessKey
	err := r.do(ctx, "DELETE", cubePath(cube)+"/share/"+url.PathEscape(id), nil, &out)
	return out, err
}

// Backup writes the server's online backup (GET /v1/backup) to w.
func (r *Client) Backup(ctx context.Context, w io.Writer) error {
	resp, err := r.send(ctx, "GET", "/v1/backup", nil)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if _, err := io.Copy(w, resp.Body); err != nil {
		return fmt.Errorf("backup from %s: %w", r.info.URL, err)
	}
	return nil
}
