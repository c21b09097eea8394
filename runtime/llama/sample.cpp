// C++ shims for sampling. llama.cpp's grammar sampler throws
// std::runtime_error when an accepted token leaves the grammar; an exception
// must not cross into Go, so every call that can reach it is wrapped here,
// and a dead end (no candidate left by the grammar) is reported before any
// token is accepted.
#include <cmath>

#include "llama.h"
#include "sample.h"

extern "C" int32_t memosrt_sample(struct llama_sampler * s, struct llama_context * c, int32_t i, int * failed) {
    try {
        *failed = 0;
        return llama_sampler_sample(s, c, i);
    } catch (...) {
        *failed = 1;
        return -1;
    }
}

static void fill(llama_token_data * buf, const float * logits, int32_t n) {
    for (int32_t t = 0; t < n; t++) {
        buf[t] = llama_token_data{t, logits[t], 0.0f};
    }
}

// The scheme of llama.cpp's common_sampler_sample (common/sampling.cpp):
// sample with the chain alone, and only if the grammar rejects that token
// apply the grammar to every candidate and sample again. Checking one token
// is far cheaper than matching the whole vocabulary against the grammar.
extern "C" int32_t memosrt_sample_grammar(struct llama_sampler * chain, struct llama_sampler * grammar,
                                          struct llama_context * c, int32_t i, llama_token_data * buf,
                                          int32_t n_vocab, int * failed) {
    try {
        *failed = 0;
        const float * logits = llama_get_logits_ith(c, i);
        if (logits == nullptr) {
            *failed = 1;
            return -1;
        }
        fill(buf, logits, n_vocab);
        llama_token_data_array cur = {buf, (size_t) n_vocab, -1, false};
        llama_sampler_apply(chain, &cur);
        if (cur.selected < 0 || cur.selected >= (int64_t) cur.size) {
            *failed = 1;
            return -1;
        }
        llama_token tok = cur.data[cur.selected].id;
        llama_token_data one_tok = {tok, 1.0f, 0.0f};
        llama_token_data_array one = {&one_tok, 1, -1, false};
        llama_sampler_apply(grammar, &one);
        if (std::isinf(one.data[0].logit) && one.data[0].logit < 0) {
            fill(buf, logits, n_vocab);
            cur = {buf, (size_t) n_vocab, -1, false};
            llama_sampler_apply(grammar, &cur);
            bool any = false;
            for (int32_t t = 0; t < n_vocab && !any; t++) {
                any = !(std::isinf(buf[t].logit) && buf[t].logit < 0);
            }
            if (!any) {
                // a dead end: no token continues the grammar. Accepting
                // whatever the chain picks could hit GGML_ABORT (an end of
                // generation while the grammar is unfinished).
                *failed = 1;
                return -1;
            }
            llama_sampler_apply(chain, &cur);
            if (cur.selected < 0 || cur.selected >= (int64_t) cur.size) {
                *failed = 1;
                return -1;
            }
            tok = cur.data[cur.selected].id;
        }
        llama_sampler_accept(grammar, tok);
        llama_sampler_accept(chain, tok);
        return tok;
    } catch (...) {
        *failed = 1;
        return -1;
    }
}
