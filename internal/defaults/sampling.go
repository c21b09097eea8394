package defaults

// Sampling is one front end's sampler defaults, in the units of
// memosrt.Sampling.
type Sampling struct {
	// Temperature scales the logits; 0 samples greedily.
	Temperature float64
	// TopP keeps the smallest set of tokens whose probabilities sum to at
	// least TopP; 1 is off.
	TopP float64
	// TopK keeps the K most likely tokens; 0 is off.
	TopK int
	// MinP drops tokens less likely than MinP times the most likely one;
	// 0 is off.
	MinP float64
	// RepeatPenalty divides the logits of recent tokens; 1 is off.
	RepeatPenalty float64
}

var (
	// Ollama is Ollama's api.DefaultOptions (ollama v0.17.4, api/types.go):
	// temperature 0.8, top_p 0.9, top_k 40, repeat_penalty 1.1; it sets no
	// min_p. The /api/chat and /api/generate routes use it.
	Ollama = Sampling{Temperature: 0.8, TopP: 0.9, TopK: 40, MinP: 0, RepeatPenalty: 1.1}

	// OpenAI is the OpenAI API reference's defaults for chat completions
	// and completions: temperature 1, top_p 1; the API has no top_k,
	// min_p or repeat penalty, so they are off. The /v1/chat/completions
	// and /v1/completions routes use it.
	OpenAI = Sampling{Temperature: 1, TopP: 1, TopK: 0, MinP: 0, RepeatPenalty: 1}

	// CLI is the flag defaults of `memosrt run`: llama.cpp's
	// common_params_sampling (common/common.h: top_k 40, top_p 0.95,
	// min_p 0.05, penalty_repeat 1.0, as llama-cli), except temperature 0
	// (greedy, so a run repeats) where llama.cpp has 0.8.
	CLI = Sampling{Temperature: 0, TopP: 0.95, TopK: 40, MinP: 0.05, RepeatPenalty: 1}
)
