// decodeloop: llama.cpp's bare decode loop with the context parameters of
// memosrt's engine or of llama-bench, built against the peer's libllama
// (bench/peer/peer.sh builds it), so that the cost of each parameter shows
// in instruction counts (valgrind --tool=callgrind) without Go in the
// process. Not part of memosrt; docs/benchmarks.md, Against llama.cpp.
//
//   decodeloop MODEL N_GEN THREADS N_CTX N_SEQ_MAX KV_UNIFIED FLASH_ATTN
//
// One token (BOS) is decoded and cleared (a warm-up), then N_GEN single-token decodes into
// sequence 0 with the logits of each step read (no sampling), as
// llama-bench's tg test. Prints tokens/s of the N_GEN steps.
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include "llama.h"

static double now(void) {
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

int main(int argc, char **argv) {
	if (argc != 8) {
		fprintf(stderr, "usage: %s MODEL N_GEN THREADS N_CTX N_SEQ_MAX KV_UNIFIED FLASH_ATTN\n", argv[0]);
		return 2;
	}
	int n_gen = atoi(argv[2]), threads = atoi(argv[3]);
	llama_backend_init();
	struct llama_model_params mp = llama_model_default_params();
	struct llama_model *m = llama_model_load_from_file(argv[1], mp);
	if (!m) return 1;
	struct llama_context_params cp = llama_context_default_params();
	cp.n_ctx = atoi(argv[4]);
	cp.n_seq_max = atoi(argv[5]);
	cp.kv_unified = atoi(argv[6]) != 0;
	cp.flash_attn_type = atoi(argv[7]) ? LLAMA_FLASH_ATTN_TYPE_ENABLED : LLAMA_FLASH_ATTN_TYPE_DISABLED;
	cp.n_threads = cp.n_threads_batch = threads;
	cp.no_perf = 1;
	struct llama_context *c = llama_init_from_model(m, cp);
	if (!c) return 1;
	const struct llama_vocab *v = llama_model_get_vocab(m);
	int n_vocab = llama_vocab_n_tokens(v);
	llama_token tok = llama_vocab_bos(v);
	struct llama_batch b = llama_batch_get_one(&tok, 1);
	if (llama_decode(c, b)) return 1;
	llama_memory_clear(llama_get_memory(c), true); // a warm-up step, as llama-bench's
	double t0 = now();
	float sink = 0;
	for (int i = 0; i < n_gen; i++) {
		tok = (llama_token)((i * 7919) % n_vocab);
		b = llama_batch_get_one(&tok, 1);
		if (llama_decode(c, b)) return 1;
		sink += llama_get_logits_ith(c, -1)[0];
	}
	double dt = now() - t0;
	printf("%.2f tok/s (%d tokens, %.1f ms) %g\n", n_gen / dt, n_gen, dt * 1000, sink * 0);
	llama_free(c);
	llama_model_free(m);
	return 0;
}
