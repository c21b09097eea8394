package llama

/*
#include "llama.h"
*/
import "C"

// SamplerParams configure a llama.cpp sampler chain. Zero values mean "off"
// for each stage; Temperature <= 0 selects greedy (argmax) sampling.
type SamplerParams struct {
	Temperature   float32 // softmax temperature; <= 0: greedy
	TopK          int     // keep the k most likely tokens; 0: off
	TopP          float32 // nucleus threshold in (0, 1); 0 or 1: off
	MinP          float32 // drop tokens below min_p × p(max); 0: off
	RepeatPenalty float32 // penalty on the last RepeatLastN tokens; 0 or 1: off
	RepeatLastN   int     // window of the repeat penalty, tokens; 0: 64
	Seed          uint32  // RNG seed for the dist sampler
}

// Sampler is a llama_sampler chain. Not safe for concurrent use.
type Sampler struct {
	s *C.struct_llama_sampler
}

// NewSampler builds the chain penalties → top-k → top-p → min-p → temp → dist,
// in the order of llama.cpp common_sampler (common/sampling.cpp), or greedy.
func NewSampler(p SamplerParams) *Sampler {
	chain := C.llama_sampler_chain_init(C.llama_sampler_chain_default_params())
	if p.RepeatPenalty > 0 && p.RepeatPenalty != 1 {
		n := p.RepeatLastN
		if n == 0 {
			n = 64
		}
		C.llama_sampler_chain_add(chain, C.llama_sampler_init_penalties(C.int32_t(n), C.float(p.RepeatPenalty), 0, 0))
	}
	if p.Temperature <= 0 {
		C.llama_sampler_chain_add(chain, C.llama_sampler_init_greedy())
		return &Sampler{s: chain}
	}
	if p.TopK > 0 {
		C.llama_sampler_chain_add(chain, C.llama_sampler_init_top_k(C.int32_t(p.TopK)))
	}
	if p.TopP > 0 && p.TopP < 1 {
		C.llama_sampler_chain_add(chain, C.llama_sampler_init_top_p(C.float(p.TopP), 1))
	}
	if p.MinP > 0 {
		C.llama_sampler_chain_add(chain, C.llama_sampler_init_min_p(C.float(p.MinP), 1))
	}
	C.llama_sampler_chain_add(chain, C.llama_sampler_init_temp(C.float(p.Temperature)))
	C.llama_sampler_chain_add(chain, C.llama_sampler_init_dist(C.uint32_t(p.Seed)))
	return &Sampler{s: chain}
}

// Sample picks the next token from output row i of the last Decode and
// accepts it into the chain's state (penalty history, RNG).
func (s *Sampler) Sample(c *Ctx, i int) Token {
	return Token(C.llama_sampler_sample(s.s, c.c, C.int32_t(i)))
}

// Accept records tok (e.g. prompt tokens) in the penalty history.
func (s *Sampler) Accept(tok Token) { C.llama_sampler_accept(s.s, C.llama_token(tok)) }

// Reset clears the chain's history.
func (s *Sampler) Reset() { C.llama_sampler_reset(s.s) }

// Close frees the chain. Idempotent.
func (s *Sampler) Close() error {
	if s.s != nil {
		C.llama_sampler_free(s.s)
		s.s = nil
	}
	return nil
}
