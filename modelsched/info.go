package modelsched

import (
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/memosrt/memosrt/runtime"
)

// ModelInfo describes the served model.
type ModelInfo struct {
	Name      string         `json:"name"`
	Path      string         `json:"path,omitempty"`
	Backend   string         `json:"backend"` // "llama", "ollama", or "" without a model
	Size      int64          `json:"size"`    // file bytes
	Digest    string         `json:"digest,omitempty"`
	Family    string         `json:"family,omitempty"`
	ParamSize string         `json:"parameter_size,omitempty"`
	Quant     string         `json:"quantization_level,omitempty"`
	NCtx      int            `json:"n_ctx,omitempty"`
	Template  string         `json:"template,omitempty"`
	Modified  time.Time      `json:"modified_at"`
	Load      time.Duration  `json:"load_ns"`
	Info      map[string]any `json:"model_info,omitempty"`
}

// ModelState is a model the OS serves and whether it is loaded now.
type ModelState struct {
	ModelInfo
	// Primary: Options.Model, the model the tier scheduler builds the
	// activation tier for (tier packs, resident packs). Other models
	// restore and store their own conversation packs only.
	Primary bool `json:"primary"`
	Loaded  bool `json:"loaded"`
	// Busy is the requests using it now.
	Busy int `json:"busy"`
	// ExpiresAt is when an idle loaded model is unloaded (keep-alive after
	// its last request); zero: never (keep-alive negative or unset).
	ExpiresAt time.Time `json:"expires_at"`
}

// EngineInfo describes the model eng loaded from path, served as name
// (template: a chat template override, "" the file's own; load: how
// long the load took); the file's size and time when it can be read.
func EngineInfo(eng *runtime.Engine, path, name, template string, load time.Duration) ModelInfo {
	sh := eng.Shape()
	mi := ModelInfo{Name: name, Path: path, Backend: "llama", Size: int64(sh.SizeBytes), Digest: eng.KVConfig().ModelFingerprint,
		NCtx: eng.NCtx(), Template: template, Modified: time.Now().UTC(), Load: load,
		ParamSize: paramSize(sh.NParams), Quant: quantOf(sh.Desc)}
	if mi.Template == "" {
		mi.Template = eng.Model().ChatTemplate()
	}
	if a, ok := eng.Model().Meta("general.architecture"); ok {
		mi.Family = a
	}
	if st, err := os.Stat(path); err == nil {
		mi.Size, mi.Modified = st.Size(), st.ModTime().UTC()
	}
	mi.Info = map[string]any{"general.architecture": mi.Family, "general.parameter_count": sh.NParams,
		mi.Family + ".context_length": sh.NCtxTrain, mi.Family + ".embedding_length": sh.NEmbd,
		mi.Family + ".block_count": sh.NLayer, mi.Family + ".attention.head_count": sh.NHead,
		mi.Family + ".attention.head_count_kv": sh.NHeadKV, "memosrt.n_ctx": eng.NCtx(), "memosrt.n_seq_max": eng.NSeqMax()}
	return mi
}

func paramSize(n uint64) string {
	switch {
	case n >= 1e9:
		return fmt.Sprintf("%.1fB", float64(n)/1e9)
	case n >= 1e6:
		return fmt.Sprintf("%.1fM", float64(n)/1e6)
	case n >= 1e3:
		return fmt.Sprintf("%.0fK", float64(n)/1e3)
	}
	return fmt.Sprint(n)
}

// quantOf takes the type from a llama_model_desc like "llama ?B F16".
func quantOf(desc string) string {
	f := strings.Fields(strings.ReplaceAll(desc, "(guessed)", ""))
	if len(f) == 0 {
		return ""
	}
	return f[len(f)-1]
}
