// C++ shim: llama_sampler_sample runs the grammar sampler's accept, which
// throws std::runtime_error when the sampled token leaves the grammar (a dead
// end: no token can continue it). An exception must not cross into Go.
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
