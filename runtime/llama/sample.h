#pragma once
#include <stdint.h>
#include "llama.h"
#ifdef __cplusplus
extern "C" {
#endif
// memosrt_sample is llama_sampler_sample with C++ exceptions caught: on one,
// *failed is set to 1 and -1 is returned.
int32_t memosrt_sample(struct llama_sampler * s, struct llama_context * c, int32_t i, int * failed);
// memosrt_sample_grammar samples output row i with chain, constrained by
// grammar (checked on the chosen token first, applied to all candidates only
// if it rejects it), and accepts the token into both. buf holds n_vocab
// entries. On a grammar dead end or any exception *failed is set to 1.
int32_t memosrt_sample_grammar(struct llama_sampler * chain, struct llama_sampler * grammar,
                               struct llama_context * c, int32_t i, llama_token_data * buf,
                               int32_t n_vocab, int * failed);
#ifdef __cplusplus
}
#endif
