package server

import (
	"fmt"
	"math"
	"math/rand/v2"
	"net/http"
	"strings"
	"time"

	"github.com/memosrt/memosrt"
	"github.com/memosrt/memosrt/errkind"
	"github.com/memosrt/memosrt/internal/defaults"
	"github.com/memosrt/memosrt/lora"
	"github.com/memosrt/memosrt/runtime/llama"
	"github.com/memosrt/memosrt/server/wire"
	"github.com/memosrt/memosrt/textmem"
	"github.com/ollama/ollama/api"
	"github.com/ollama/ollama/types/model"
)

// cube returns the request's cube: the X-Memosrt-Cube header, else opt
// (options.cube on Ollama's routes, the body's cube elsewhere), else an
// access key's only cube (wire.DefaultCube). The OS refuses a cube that
// does not exist. A header and an option naming two cubes are refused: a
// 403 when the access key may not read the option's cube (as any request
// naming a cube it may not read), else a 400 naming the option.
func (s *Server) cube(r *http.Request, opt string) (string, error) {
	c := r.Header.Get(CubeHeader)
	if c != "" && opt != "" && opt != c {
		if textmem.ValidCube(opt) {
			if err := wire.Allow(r.Context(), s.os, opt, memosrt.KeyRead); err != nil {
				return "", err
			}
		}
		field := "cube"
		if strings.HasPrefix(r.URL.Path, "/api/") {
			field = "options.cube"
		}
		return "", wire.BadField(field, "%q, but the %s header names %q (give one, or the same cube in both)", opt, CubeHeader, c)
	}
	if c == "" {
		c = opt
	}
	if c != "" && !textmem.ValidCube(c) {
		return "", wire.BadField("cube", "%q: %v", c, textmem.ErrBadCube)
	}
	if c == "" {
		c = wire.DefaultCube(r.Context())
	}
	// a chat or generation with a cube reads it
	if c != "" {
		if err := wire.Allow(r.Context(), s.os, c, memosrt.KeyRead); err != nil {
			return "", err
		}
	}
	return c, nil
}

// sampling are the per-request generation settings, before defaults.
type sampling struct {
	Temperature, TopP, MinP, RepeatPenalty      *float64
	TopK, Seed, NumPredict, NumCtx, RepeatLastN *int
	Stop                                        []string
	Cube                                        string
	Cubes                                       []string    // options.cubes: the cubes, the first written to
	Adapters                                    []lora.Spec // nil: not given (the cube's defaults)
	// ToolChoice and MaxToolCalls are memosrt's extensions of Ollama's
	// options (Ollama always lets the model choose): auto, none, required
	// or a tool's name; the cap on one answer's calls.
	ToolChoice   string
	MaxToolCalls *int
	// Record is options.record, memosrt's extension as cube is (Ollama's
	// clients send no top-level field of their own): a chat's top-level
	// "record" wins (see memosrt.ParseRecordMode).
	Record string
}

// params turns s into sampler parameters, taking what s leaves out from
// the API's defaults d (defaults.Ollama, defaults.OpenAI).
func (s sampling) params(d defaults.Sampling) llama.SamplerParams {
	f := func(p *float64, d float64) float32 {
		if p == nil {
			return float32(d)
		}
		return float32(*p)
	}
	p := llama.SamplerParams{Temperature: f(s.Temperature, d.Temperature), TopP: f(s.TopP, d.TopP), MinP: f(s.MinP, d.MinP),
		RepeatPenalty: f(s.RepeatPenalty, d.RepeatPenalty), TopK: d.TopK}
	if s.TopK != nil {
		p.TopK = *s.TopK
	}
	if s.RepeatLastN != nil {
		switch n := *s.RepeatLastN; {
		case n == 0: // Ollama: 0 disables the repeat penalty
			p.RepeatPenalty = 1
		case n == -1: // Ollama: -1 is num_ctx (memosrt.Sampling takes it as is)
			p.RepeatLastN = -1
		default:
			p.RepeatLastN = n
		}
	}
	if s.Seed != nil && *s.Seed >= 0 {
		p.Seed = uint32(*s.Seed)
	} else {
		p.Seed = rand.Uint32()
	}
	return p
}

// ignoredOptions are Ollama options accepted and not used (load-time
// settings of the loaded model, or samplers we do not have).
var ignoredOptions = map[string]bool{"num_keep": true, "typical_p": true, "presence_penalty": true,
	"frequency_penalty": true, "num_batch": true, "num_gpu": true, "main_gpu": true, "use_mmap": true,
	"num_thread": true, "penalize_newline": true, "mirostat": true, "mirostat_tau": true, "mirostat_eta": true,
	"numa": true, "low_vram": true, "vocab_only": true, "use_mlock": true, "tfs_z": true}

// parseOllamaOptions reads Ollama's options map, naming the bad key.
func parseOllamaOptions(m map[string]any) (sampling, error) {
	var s sampling
	num := func(k string, v any) (float64, error) {
		f, ok := v.(float64)
		if !ok || math.IsNaN(f) || math.IsInf(f, 0) {
			return 0, wire.BadField("options."+k, "want a number, got %T", v)
		}
		return f, nil
	}
	integer := func(k string, v any) (*int, error) {
		f, err := num(k, v)
		if err != nil {
			return nil, err
		}
		if f != math.Trunc(f) || math.Abs(f) > 1<<53 {
			return nil, wire.BadField("options."+k, "want an integer, got %v", f)
		}
		n := int(f)
		return &n, nil
	}
	float := func(k string, v any, lo, hi float64) (*float64, error) {
		f, err := num(k, v)
		if err != nil {
			return nil, err
		}
		if f < lo || f > hi {
			return nil, wire.BadField("options."+k, "%v not in [%v, %v]", f, lo, hi)
		}
		return &f, nil
	}
	var err error
	for k, v := range m {
		if v == nil {
			continue
		}
		switch k {
		case "temperature":
			s.Temperature, err = float(k, v, 0, 100)
		case "top_p":
			s.TopP, err = float(k, v, 0, 1)
		case "min_p":
			s.MinP, err = float(k, v, 0, 1)
		case "repeat_penalty":
			s.RepeatPenalty, err = float(k, v, 0, 100)
		case "top_k":
			s.TopK, err = integer(k, v)
		case "seed":
			s.Seed, err = integer(k, v)
		case "num_predict":
			s.NumPredict, err = integer(k, v)
		case "num_ctx":
			s.NumCtx, err = integer(k, v) // its range: pipeline/request's CheckOptions, as every option's
		case "repeat_last_n":
			s.RepeatLastN, err = integer(k, v)
			if err == nil && *s.RepeatLastN < -1 {
				err = wire.BadField("options.repeat_last_n", "%d < -1 (-1: num_ctx, 0: off; more than num_ctx is num_ctx)", *s.RepeatLastN)
			}
		case "stop":
			s.Stop, err = stringList("options.stop", v)
		case "adapters":
			s.Adapters, err = adapterSpecs("options.adapters", v)
		case "tool_choice":
			c, ok := v.(string)
			if !ok {
				err = wire.BadField("options.tool_choice", "want a string, got %T", v)
			}
			s.ToolChoice = c
		case "max_tool_calls":
			s.MaxToolCalls, err = integer(k, v)
			if err == nil && *s.MaxToolCalls < 1 {
				err = wire.BadField("options.max_tool_calls", "%d < 1", *s.MaxToolCalls)
			}
		case "cube":
			c, ok := v.(string)
			if !ok {
				err = wire.BadField("options.cube", "want a string, got %T", v)
			}
			s.Cube = c
		case "cubes":
			s.Cubes, err = cubeListOf("options.cubes", v)
		case "record":
			c, ok := v.(string)
			if !ok {
				err = wire.BadField("options.record", "want a string, got %T", v)
			}
			s.Record = c
		default:
			// unknown and load-time options are accepted, as Ollama does
		}
		if err != nil {
			return s, err
		}
	}
	if s.Cube != "" && !textmem.ValidCube(s.Cube) {
		return s, wire.BadField("options.cube", "%q: %v", s.Cube, textmem.ErrBadCube)
	}
	return s, nil
}

// stringList accepts a string or an array of strings.
func stringList(field string, v any) ([]string, error) {
	switch x := v.(type) {
	case nil:
		return nil, nil
	case string:
		return []string{x}, nil
	case []any:
		out := make([]string, len(x))
		for i, e := range x {
			s, ok := e.(string)
			if !ok {
				return nil, wire.BadField(fmt.Sprintf("%s[%d]", field, i), "want a string, got %T", e)
			}
			out[i] = s
		}
		return out, nil
	case []string:
		return x, nil
	}
	return nil, wire.BadField(field, "want a string or an array of strings, got %T", v)
}

var errModelNotFound = errkind.New(errkind.NotFound, "model not found")

// model resolves a request's model name ("" is the primary) to a model
// the OS serves (see sameModel). Without a model it is
// memosrt.ErrNoModel; an unknown name is a 404 naming what is served.
func (s *Server) model(name string) (memosrt.ModelInfo, error) {
	ms := s.os.Models()
	if len(ms) == 0 {
		return memosrt.ModelInfo{}, memosrt.ErrNoModel
	}
	if name == "" {
		return ms[0].ModelInfo, nil
	}
	names := make([]string, len(ms))
	for i, m := range ms {
		if sameModel(name, m.Name) {
			return m.ModelInfo, nil
		}
		names[i] = m.Name
	}
	return memosrt.ModelInfo{}, fmt.Errorf("%w: %q (this server serves %s)", errModelNotFound, name, strings.Join(names, ", "))
}

// embedModel resolves an embedding request's model name as model does
// ("" the primary) when a served model embeds; with an embedder of its own
// (serve --embed-model, --embed hash or ollama:MODEL) or the upstream
// backend the name does not choose it and is accepted as it is
// ("nomic-embed-text"), and the result is "".
func (s *Server) embedModel(name string) (string, error) {
	if b := s.os.Model().Backend; s.os.HasEmbedder() || b == memosrt.UpstreamOllama || b == memosrt.UpstreamOpenAI {
		return "", nil
	}
	mi, err := s.model(name)
	return mi.Name, err
}

// keepAliveField is the keep_alive of a request (Ollama's, and the OpenAI
// routes' extension): api.Duration's forms (a Go duration "5m", "24h",
// "-1s"; a number of seconds; negative forever); anything else is a 400
// naming keep_alive, on every route alike.
type keepAliveField struct{ api.Duration }

// UnmarshalJSON implements json.Unmarshaler; errors are *memosrt.FieldError.
func (k *keepAliveField) UnmarshalJSON(b []byte) error {
	if string(b) == "null" {
		return nil
	}
	if err := k.Duration.UnmarshalJSON(b); err != nil {
		return wire.BadField("keep_alive", `want a duration ("5m", "24h", negative: forever) or a number of seconds, got %.40s`, b)
	}
	return nil
}

// keepAlive maps a request's keep_alive (nil: the server default; negative,
// which api.Duration makes the largest duration: forever) to
// memosrt.Request.KeepAlive.
func keepAlive(d *keepAliveField) *time.Duration {
	if d == nil {
		return nil
	}
	k := d.Duration.Duration
	if k < 0 || k == time.Duration(math.MaxInt64) {
		k = -1
	}
	return &k
}

// sameModel reports whether a request's model name names the served model
// want: equal with or without the ":latest" tag, or, when both are Ollama
// model names, equal once host, namespace and tag take Ollama's defaults,
// ignoring case as Ollama does (types/model.Name.EqualFold): for a model
// served as "stories:latest", "stories", "library/stories" and
// "registry.ollama.ai/library/stories:latest" all match.
func sameModel(name, want string) bool {
	if strings.TrimSuffix(name, ":latest") == strings.TrimSuffix(want, ":latest") {
		return true
	}
	n, w := model.ParseName(name), model.ParseName(want)
	return n.IsFullyQualified() && w.IsFullyQualified() && n.EqualFold(w)
}

// adapterSpecs reads LoRA adapters: "a:0.5,b", "none", or an array of
// "NAME[:SCALE]". An empty list means no adapter at all.
func adapterSpecs(field string, v any) ([]lora.Spec, error) {
	if v == nil {
		return nil, nil
	}
	if str, ok := v.(string); ok {
		sp, err := lora.ParseSpecs(str)
		if err != nil {
			return nil, wire.BadField(field, "%v", err)
		}
		return sp, nil
	}
	list, err := stringList(field, v)
	if err != nil {
		return nil, err
	}
	out := []lora.Spec{}
	for i, x := range list {
		sp, err := lora.ParseSpec(x)
		if err != nil {
			return nil, wire.BadField(fmt.Sprintf("%s[%d]", field, i), "%v", err)
		}
		out = append(out, sp)
	}
	return out, nil
}
