#pragma once
#include <stdint.h>
#include "llama.h"
#ifdef __cplusplus
extern "C" {
#endif
// memosrt_sample is llama_sampler_sample with C++ exceptions caught: on one,
// *failed is set to 1 and -1 is returned.
int32_t memosrt_sample(struct llama_sampler * s, struct llama_context * c, int32_t i, int * failed);
#ifdef __cplusplus
}
#endif
