package llama

/*
#include <stdlib.h>
#include "llama.h"
#include "sample.h"
*/
import "C"

import (
	"fmt"
	"math"
	"unsafe"
)

// SamplerParams configure a llama.cpp sampler chain. Zero values mean "off"
// for each stage; Temperature <= 0 selects greedy (argmax) sampling.
type SamplerParams struct {
	Temperature   float32 // softmax temperature; <= 0: greedy
	TopK          int     // keep the k most likely tokens; 0: off
	TopP          float32 // nucleus threshold in (0, 1); 0 or 1: off
	MinP          float32 // drop tokens below min_p × p(max); 0: off
	RepeatPenalty float32 // penalty on the last RepeatLastN tokens; 0 or 1: off
	RepeatLastN   int     // window of the repeat penalty, tokens; 0: 64; < 0 is ErrBadParams (callers map Ollama's -1 to num_ctx)
	Seed          uint32  // RNG seed for the dist sampler
	// Grammar, if set, is a GBNF grammar (start rule "root") that the output
	// must follow (llama_sampler_init_grammar); see package runtime/grammar.
	// Once the grammar is complete only end-of-generation can be sampled.
	Grammar string
}

// Sampler is a llama_sampler chain. Not safe for concurrent use. After
// Close, Sample returns ErrClosed and Reset does nothing.
type Sampler struct {
	s       *C.struct_llama_sampler // the chain
	grammar *C.struct_llama_sampler // nil without a grammar
	buf     *C.llama_token_data     // n_vocab candidates (C memory), with a grammar
	nVocab  int
}

// NewSampler builds the chain penalties → top-k → top-p → min-p → temp →
// dist, in the order of llama.cpp common_sampler (common/sampling.cpp), or
// penalties → greedy; a grammar is checked against the chain's choice and
// applied to all candidates only when it rejects it, as common_sampler
// does (exact for greedy decoding). history (e.g. the
// prompt) seeds the repeat penalty's window; it is not matched against the
// grammar. An error is returned, and nothing allocated, if p.Grammar does
// not parse (ErrGrammar) or a parameter is out of range (ErrBadParams).
func NewSampler(m *Model, p SamplerParams, history []Token) (*Sampler, error) {
	if p.RepeatLastN < 0 || p.RepeatLastN > math.MaxInt32 {
		return nil, fmt.Errorf("%w: repeat_last_n %d outside [0, 2^31)", ErrBadParams, p.RepeatLastN)
	}
	var grammar *C.struct_llama_sampler
	nVocab := 0
	if p.Grammar != "" {
		m.mu.RLock()
		if m.m == nil {
			m.mu.RUnlock()
			return nil, ErrClosed
		}
		gs, root := C.CString(p.Grammar), C.CString("root")
		grammar = C.llama_sampler_init_grammar(m.vocab, gs, root)
		nVocab = int(C.llama_vocab_n_tokens(m.vocab))
		C.free(unsafe.Pointer(gs))
		C.free(unsafe.Pointer(root))
		m.mu.RUnlock()
		if grammar == nil {
			return nil, fmt.Errorf("%w: llama_sampler_init_grammar rejected it", ErrGrammar)
		}
	}
	chain := C.llama_sampler_chain_init(C.llama_sampler_chain_default_params())
	if p.RepeatPenalty > 0 && p.RepeatPenalty != 1 {
		n := p.RepeatLastN
		if n == 0 {
			n = 64
		}
		pen := C.llama_sampler_init_penalties(C.int32_t(n), C.float(p.RepeatPenalty), 0, 0)
		for _, t := range history[max(0, len(history)-n):] {
			C.llama_sampler_accept(pen, C.llama_token(t))
		}
		C.llama_sampler_chain_add(chain, pen)
	}
	smp := &Sampler{s: chain}
	if grammar != nil {
		smp.grammar = grammar
		smp.nVocab = nVocab
		smp.buf = (*C.llama_token_data)(C.malloc(C.size_t(smp.nVocab) * C.size_t(unsafe.Sizeof(C.llama_token_data{}))))
	}
	if p.Temperature <= 0 {
		C.llama_sampler_chain_add(chain, C.llama_sampler_init_greedy())
		return smp, nil
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
	return smp, nil
}

// Sample picks the next token from output row i of the last Decode and
// accepts it into the chain's state (penalty history, grammar, RNG). It
// fails with ErrGrammar when the grammar reaches a dead end (llama.cpp
// throws; the sampler is unusable afterwards).
func (s *Sampler) Sample(c *Ctx, i int) (Token, error) {
	if s == nil || s.s == nil || c.closed() {
		return -1, ErrClosed
	}
	var failed C.int
	var tok C.int32_t
	if s.grammar != nil {
		tok = C.memosrt_sample_grammar(s.s, s.grammar, c.c, C.int32_t(i), s.buf, C.int32_t(s.nVocab), &failed)
	} else {
		tok = C.memosrt_sample(s.s, c.c, C.int32_t(i), &failed)
	}
	if failed != 0 {
		return -1, fmt.Errorf("%w: no token continues the grammar", ErrGrammar)
	}
	return Token(tok), nil
}

// Reset clears the chain's history and restarts the grammar (a no-op once
// closed).
func (s *Sampler) Reset() {
	if s == nil || s.s == nil {
		return
	}
	C.llama_sampler_reset(s.s)
	if s.grammar != nil {
		C.llama_sampler_reset(s.grammar)
	}
}

// Close frees the chain. Idempotent; a nil Sampler is a no-op.
func (s *Sampler) Close() error {
	if s != nil && s.s != nil {
		C.llama_sampler_free(s.s)
		s.s = nil
		if s.grammar != nil {
			C.llama_sampler_free(s.grammar)
			C.free(unsafe.Pointer(s.buf))
			s.grammar, s.buf = nil, nil
		}
	}
	return nil
}
