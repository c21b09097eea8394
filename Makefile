# memosrt build. `make` builds bin/memosrt; `make test` runs the whole suite.
# CPU flags: MARCH=native by default; MARCH=x86-64-v3 for a portable build.
MARCH    ?= native
OPT      ?= -O3
# ollama's module ships ggml-cpu without its AMX sources (no Go file in ggml-cpu/amx),
# so AMX is kept off even where -march=native would enable it.
NOAMX    := $(if $(filter x86_64,$(shell uname -m)),-mno-amx-tile -mno-amx-int8 -mno-amx-bf16)
# No OpenMP: ggml's own threadpool (attached per context) is as fast on the 1B
# shape and 6x faster on small models under Go; docs/benchmarks.md, Build
# choices, has the figures.
CGO_CFLAGS   ?= $(OPT) -march=$(MARCH) $(NOAMX)
CGO_CXXFLAGS ?= $(OPT) -march=$(MARCH) $(NOAMX)
CGO_LDFLAGS  ?=
export CGO_ENABLED=1
export CGO_CFLAGS CGO_CXXFLAGS CGO_LDFLAGS
# gcc and g++ are found first in build/ccwrap: the real compilers, with -w
# added for the vendored llama.cpp/ggml sources only (their warnings are
# upstream's); our own C/C++ keeps -Wall. Go's cache keys do not change.
export PATH := $(CURDIR)/build/ccwrap:$(PATH)

GO       ?= go
OLLAMA   := github.com/ollama/ollama
TESTFLAGS ?= -count=1 -timeout 40m

.PHONY: all build links test vet bench bench-ttft bench-decode bench-contention bench-shared bench-peer demo example clean soak soak-mix

all: build

# third_party/ holds links into the pinned ollama module so cgo finds llama.h and ggml.h.
links:
	@dir=$$($(GO) list -m -f '{{.Dir}}' $(OLLAMA)) || exit 1; \
	if [ -z "$$dir" ] || [ ! -d "$$dir" ]; then $(GO) mod download $(OLLAMA); dir=$$($(GO) list -m -f '{{.Dir}}' $(OLLAMA)); fi; \
	mkdir -p third_party; \
	ln -sfn "$$dir/llama/llama.cpp" third_party/llama.cpp; \
	ln -sfn "$$dir/ml/backend/ggml/ggml" third_party/ggml

build: links
	$(GO) build -o bin/memosrt ./cmd/memosrt

vet: links
	$(GO) vet ./...

# With the LoCoMo file beside the repo, bench/recall also checks its recall bar.
LOCOMO ?= $(abspath ../shared/data/locomo-dev.json)
# The text tier's Store tests run a second and third time over PostgreSQL
# (plain and sealed records), where initdb and postgres exist.
test: links vet
	MEMOSRT_LOCOMO=$(if $(wildcard $(LOCOMO)),$(LOCOMO)) $(GO) test $(TESTFLAGS) ./...
	MEMOSRT_TEST_TEXT_STORE=postgres $(GO) test -count=1 $(TESTFLAGS) ./textmem/
	MEMOSRT_TEST_TEXT_STORE=postgres-sealed $(GO) test -count=1 $(TESTFLAGS) ./textmem/

bench: build
	$(GO) test -run '^$$' -bench . -benchtime 1x ./bench/...

# Per-token cost of one stream on stories260K: the engine against the raw
# llama_decode loop on its own context, then OS.Generate (what `memosrt run`
# calls) against the engine; each pair interleaved run by run.
bench-decode: links
	$(GO) test -run '^$$' -bench DecodeOverhead -benchtime 9x ./runtime/
	$(GO) test -run '^$$' -bench RunDecode -benchtime 9x ./pipeline/
	$(MAKE) build
	GO=$(GO) ./bench/runproc.sh

# Warm TTFT of a node restoring a 1024-token pack from the shared Redis vs
# from its own Badger, cold and floor beside them (needs
# redis-server). The generated 1B shape when models/1b.gguf is made.
bench-shared: links
	MEMOSRT_BENCH_MODEL=$(if $(wildcard models/1b.gguf),$(CURDIR)/models/1b.gguf,) \
		$(GO) test -run '^$$' -bench SharedTTFT -benchtime 1x -timeout 30m ./bench/
	$(GO) test -run '^$$' -bench TextStore -benchtime 200x ./textmem/

# What recording a chat turn adds to a chat request on
# stories260K (RecordTurn vs RecordNone, alternated; p50s and the p50 of the
# paired differences, ms).
.PHONY: bench-conv
bench-conv: links
	$(GO) test -run '^$$' -bench TurnRecording -benchtime 400x .

# The sessions recall bar on LoCoMo dev: every turn fed through the chat API and
# recorded, short-term queues bounded, every turn placed once, and recall@10
# of OS.Search (sessions + memories) >= the flat store's (tens of minutes).
.PHONY: recall-sessions
recall-sessions: links
	MEMOSRT_LOCOMO=$(LOCOMO) MEMOSRT_LOCOMO_SESSIONS=1 $(GO) test -count=1 -timeout 120m -v -run TestLoCoMoDevSessions ./bench/recall/

# Decode under CPU contention: memosrt's engine vs llama.cpp's own decode
# loop (threadpool and OpenMP builds) under BUSY `yes` loops (bench/contention.sh).
bench-contention: links
	GO=$(GO) ./bench/contention.sh

# memosrt against llama.cpp release b7347 as a user installs it:
# bench/peer/peer.sh builds llama-bench and llama-server with CMake under
# .cache/peer/ (apt cmake and npm node-llama-cpp when missing; about 10 min
# on 2 cores, once), then runs both alternately on the 1B shape and
# stories260K and prints a Markdown table (docs/benchmarks.md, Against
# llama.cpp). PAIRS=3 THREADS=$(nproc) ROWS="decode-1b decode-stories
# prefill-1b" (add warm-1024 warm-4096 for warm TTFT) LOAD_MAX LOAD_WAIT.
bench-peer: build models/1b.gguf
	./bench/peer/peer.sh

# The TTFT benchmark: generated 1B shape, 1024-token pack, 16-token query, 2 threads.
models/1b.gguf: | build
	./bin/memosrt gen-model --preset 1b --out $@ --tokenizer ../shared/models/llama-2-tiny-random.gguf
bench-ttft: build models/1b.gguf
	./bin/memosrt bench ttft --model models/1b.gguf --prefix 1024 --threads 2 --reps 5

# The main job on the shipped model: a cube of memories, its pack warmed into
# the activation tier, then a generation that restores it (JSON with TTFT).
MODEL ?= ../shared/models/stories260K.gguf
DEMO_DB ?= .cache/demo-db
demo: build
	rm -rf $(DEMO_DB)
	./bin/memosrt mem add --db $(DEMO_DB) --cube lily "Lily has a dog named Max."
	./bin/memosrt mem add --db $(DEMO_DB) --cube lily "Max is brown and likes to run in the park."
	./bin/memosrt mem add --db $(DEMO_DB) --cube lily "Lily's favourite food is apple pie."
	./bin/memosrt kv warm --db $(DEMO_DB) --model $(MODEL) --cube lily
	./bin/memosrt run --db $(DEMO_DB) --model $(MODEL) --cube lily --num-predict 48 --json "Once upon a time, Lily"
	./bin/memosrt run --db $(DEMO_DB) --model $(MODEL) --cube lily --num-predict 48 --json --no-cache "Once upon a time, Lily"

# The Go embedding example: its own module (examples/assistant/go.mod) that
# imports github.com/memosrt/memosrt (replace => ../..); `make links` is its
# one setup step in a checkout (cgo finds llama.h through third_party/). It
# builds under the CGO_* flags exported above and the same GOCACHE, so after
# `make` the llama.cpp/ggml packages come from the cache (docs/benchmarks.md,
# Build choices); a plain `go build` in examples/assistant uses Go's default
# flags and compiles them again.
example: links
	cd examples/assistant && $(GO) build -o ../../bin/assistant .
	rm -rf .cache/assistant-db
	./bin/assistant --db .cache/assistant-db --model $(MODEL) \
		--remember "Lily has a dog named Max." --remember "Max likes to run in the park." "Where does the dog Max run?" "Once upon a time, Lily"

clean:
	rm -rf bin third_party

# ---- GPU backend module ----------------------------------------------------
# `make cuda` builds the ggml CUDA backend as loadable modules into lib/memosrt/:
# libggml-cuda.so and the libggml-base.so.0 it links (RUNPATH $ORIGIN, so it is
# found beside it). bin/memosrt loads them at start through
# ggml_backend_load_all_from_path(<binary dir>/../lib/memosrt; MEMOSRT_LIB_PATH
# overrides), which takes files named exactly libggml-<backend>.so.
# Sources: the ggml tree of the pinned ollama module, built with ollama's own
# top-level CMakeLists.txt (GGML_BACKEND_DL, BUILD_SHARED_LIBS, GGML_CUDA_FA,
# GGML_CUDA_GRAPHS, ... as in ollama's releases); only the ggml-cuda target and
# its dependency ggml-base are built, no CPU backend modules (ours is compiled
# into the binary). ggml-base symbols: bin/memosrt has its own static copy and
# exports none of it (nm -D), so the module binds to libggml-base.so: two copies
# of ggml-base, as in ollama's runner. That is safe only with the same ggml
# revision on both sides (same pinned module); see bench/gpu-check.sh.
# Needs cmake >= 3.21 (3.24 for CUDA_ARCH=native) and nvcc (CUDA 12+).
#   CUDA_ARCH   CMAKE_CUDA_ARCHITECTURES: 90a (H100/H200, default), 89, 80, native, "80;90a"
#   CUDA_SRC    ollama source dir (default: .cache/ollama-src, else `go list -m` dir)
#   NVCC        nvcc path (default: PATH, then /usr/local/cuda/bin/nvcc)
# `make cuda-src` copies the needed sources (9 MB) to .cache/ollama-src for a
# machine without Go. The CMake build tree is $(CUDA_BUILD) (git-ignored).
CUDA_ARCH  ?= 90a
CUDA_BUILD ?= .cache/cmake-cuda
CUDA_JOBS  ?= $(shell nproc 2>/dev/null || echo 4)
CUDA_SRC   ?=
NVCC       ?=
CMAKE      ?= cmake

.PHONY: cuda cuda-src

cuda:
	@nvcc="$(NVCC)"; \
	[ -n "$$nvcc" ] || nvcc=$$(command -v nvcc 2>/dev/null) || true; \
	[ -n "$$nvcc" ] || { [ -x /usr/local/cuda/bin/nvcc ] && nvcc=/usr/local/cuda/bin/nvcc; } || true; \
	if [ -z "$$nvcc" ] || [ ! -x "$$nvcc" ]; then \
		echo "make cuda: nvcc not found (not in PATH nor /usr/local/cuda/bin); install the CUDA toolkit 12+ or set NVCC=/path/to/nvcc. Nothing built." >&2; \
		exit 1; \
	fi; \
	command -v $(CMAKE) >/dev/null 2>&1 || { echo "make cuda: $(CMAKE) not found; install cmake >= 3.21 (apt-get install cmake). Nothing built." >&2; exit 1; }; \
	src="$(CUDA_SRC)"; \
	[ -n "$$src" ] || { [ -f .cache/ollama-src/CMakeLists.txt ] && src=.cache/ollama-src; } || true; \
	[ -n "$$src" ] || src=$$($(GO) list -m -f '{{.Dir}}' $(OLLAMA) 2>/dev/null) || true; \
	if [ -z "$$src" ] || [ ! -f "$$src/CMakeLists.txt" ] || [ ! -d "$$src/ml/backend/ggml/ggml/src/ggml-cuda" ]; then \
		echo "make cuda: ollama sources not found (set CUDA_SRC, or run 'make cuda-src' on a machine with Go). Nothing built." >&2; \
		exit 1; \
	fi; \
	echo "make cuda: nvcc $$nvcc, sources $$src, CUDA_ARCH $(CUDA_ARCH)"; \
	set -e; \
	$(CMAKE) -S "$$src" -B $(CUDA_BUILD) -DCMAKE_BUILD_TYPE=Release \
		-DCMAKE_CUDA_COMPILER="$$nvcc" -DCUDAToolkit_ROOT="$$(dirname "$$(dirname "$$nvcc")")" \
		-DCMAKE_CUDA_ARCHITECTURES='$(CUDA_ARCH)' \
		-DCMAKE_BUILD_WITH_INSTALL_RPATH=ON '-DCMAKE_INSTALL_RPATH=$$ORIGIN' -DCMAKE_INSTALL_RPATH_USE_LINK_PATH=ON \
		-DCMAKE_DISABLE_FIND_PACKAGE_Vulkan=ON; \
	$(CMAKE) --build $(CUDA_BUILD) --target ggml-cuda -j $(CUDA_JOBS); \
	mkdir -p lib/memosrt; \
	rm -f lib/memosrt/libggml-cuda.so lib/memosrt/libggml-base.so*; \
	cp -P $(CUDA_BUILD)/lib/ollama/libggml-base.so* $(CUDA_BUILD)/lib/ollama/libggml-cuda.so lib/memosrt/; \
	if command -v ldd >/dev/null && ldd lib/memosrt/libggml-cuda.so | grep 'not found' >&2; then \
		echo "make cuda: warning: libggml-cuda.so has unresolved libraries (above); add the CUDA lib64 dir to LD_LIBRARY_PATH" >&2; \
	fi; \
	ls -l lib/memosrt

cuda-src:
	@dir=$$($(GO) list -m -f '{{.Dir}}' $(OLLAMA)) && [ -n "$$dir" ] || { echo "make cuda-src: go list -m $(OLLAMA) failed" >&2; exit 1; }; \
	rm -rf .cache/ollama-src && mkdir -p .cache/ollama-src/ml/backend/ggml && \
	cp "$$dir/CMakeLists.txt" .cache/ollama-src/ && \
	cp -R "$$dir/ml/backend/ggml/ggml" .cache/ollama-src/ml/backend/ggml/ && \
	chmod -R u+w .cache/ollama-src && \
	echo "make cuda-src: copied $$dir sources to .cache/ollama-src ($$(du -sh .cache/ollama-src | cut -f1))"

# ---- Hardening ----------------------------------------------------------
# `make race`: go test -race over every package whose tests link none of our
# cgo code (computed: runtime/llama and its importers are left out, they are
# slow under the race detector). About 15 s.
# `make fuzz FUZZTIME=60s`: every fuzz target for FUZZTIME each (bench/fuzz.sh;
# 6 targets: about 6 × FUZZTIME plus a one-time instrumented build of llama.cpp).
# `make crash CYCLES=100`: the SIGKILL crash harness alone (make test runs it too).
FUZZTIME ?= 60s
CYCLES   ?= 100

.PHONY: race fuzz crash

# every package under -race, cgo ones included (runtime, server, the OS:
# where the concurrency is); the crash harness with 10 cycles. Not
# cmd/memosrt: its tests run the memosrt binary, built without -race, as
# subprocesses (make test runs them), so under -race they would repeat
# make test's minutes and check only their own harness. Tests that only
# check numbers (calibration tables, output equality over long prefills)
# skip themselves under -race (testenv.SkipUnderRace).
race: links
	MEMOSRT_CRASH_CYCLES=10 $(GO) test -race -count=1 -timeout 40m $$($(GO) list ./... | grep -v '/cmd/memosrt$$')

fuzz: links
	FUZZTIME=$(FUZZTIME) GO=$(GO) ./bench/fuzz.sh

crash: links
	MEMOSRT_CRASH_CYCLES=$(CYCLES) $(GO) test -count=1 -v -run TestCrashRecovery ./bench/crash

# ---- Edge build: linux/arm64 ------------------------------------------------
# `make arm64` cross-builds bin/linux-arm64/memosrt (cgo, llama.cpp/ggml CPU
# backend included) next to the native bin/memosrt. Needs the Debian cross
# toolchain: apt-get install gcc-aarch64-linux-gnu g++-aarch64-linux-gnu.
# The native CGO_CFLAGS above (-march=native, -mno-amx-*) are x86 flags, so the
# recipe sets its own: $(ARM64_OPT) -march=$(ARM64_MARCH). The default,
# armv8.2-a+dotprod, gives ggml NEON (always on for aarch64) and the SDOT/UDOT
# dot-product kernels (__ARM_FEATURE_DOTPROD) of its quantized matmuls; a core
# without dotprod (Cortex-A53/A72: Raspberry Pi 3/4) wants ARM64_MARCH=armv8-a,
# and ARM64_MARCH=armv8.2-a+dotprod+fp16 or armv8.6-a (i8mm) suit newer cores.
# `make demo-arm64` runs the demo's main job with that binary under qemu-user
# (apt-get install qemu-user; QEMU_ARM64= on an arm64 host runs it directly)
# in its own data dir, and fails unless the
# restored run reports cached_tokens > 0 and its response is byte-identical
# to the --no-cache run's.
ARM64_CC      ?= aarch64-linux-gnu-gcc
ARM64_CXX     ?= aarch64-linux-gnu-g++
ARM64_MARCH   ?= armv8.2-a+dotprod
ARM64_OPT     ?= $(OPT)
ARM64_LDFLAGS ?=
ARM64_BIN     ?= bin/linux-arm64/memosrt
QEMU_ARM64    ?= qemu-aarch64 -L /usr/aarch64-linux-gnu
ARM64_DEMO_DB ?= .cache/demo-arm64-db
ARM64_DEMO_OUT ?= .cache/demo-arm64-out

.PHONY: arm64 demo-arm64

arm64: links
	@command -v $(ARM64_CC) >/dev/null && command -v $(ARM64_CXX) >/dev/null || { \
		echo "make arm64: $(ARM64_CC) / $(ARM64_CXX) not found; apt-get install gcc-aarch64-linux-gnu g++-aarch64-linux-gnu (or set ARM64_CC, ARM64_CXX). Nothing built." >&2; exit 1; }
	@mkdir -p $(dir $(ARM64_BIN))
	GOOS=linux GOARCH=arm64 CGO_ENABLED=1 CC=$(ARM64_CC) CXX=$(ARM64_CXX) \
	CGO_CFLAGS="$(ARM64_OPT) -march=$(ARM64_MARCH)" CGO_CXXFLAGS="$(ARM64_OPT) -march=$(ARM64_MARCH)" \
	CGO_LDFLAGS="$(ARM64_LDFLAGS)" \
		$(GO) build -o $(ARM64_BIN) ./cmd/memosrt

# The demo's main job (mem add x3, kv warm, run restored, run --no-cache) under
# qemu; the two JSON lines are kept in $(ARM64_DEMO_OUT)/ and compared with sed.
demo-arm64: arm64
	$(if $(QEMU_ARM64),@command -v $(firstword $(QEMU_ARM64)) >/dev/null || { \
		echo "make demo-arm64: $(firstword $(QEMU_ARM64)) not found; apt-get install qemu-user (or set QEMU_ARM64; empty on an arm64 host)." >&2; exit 1; })
	rm -rf $(ARM64_DEMO_DB) $(ARM64_DEMO_OUT)
	mkdir -p $(ARM64_DEMO_OUT)
	$(QEMU_ARM64) $(ARM64_BIN) mem add --db $(ARM64_DEMO_DB) --cube lily "Lily has a dog named Max."
	$(QEMU_ARM64) $(ARM64_BIN) mem add --db $(ARM64_DEMO_DB) --cube lily "Max is brown and likes to run in the park."
	$(QEMU_ARM64) $(ARM64_BIN) mem add --db $(ARM64_DEMO_DB) --cube lily "Lily's favourite food is apple pie."
	$(QEMU_ARM64) $(ARM64_BIN) kv warm --db $(ARM64_DEMO_DB) --model $(MODEL) --cube lily
	$(QEMU_ARM64) $(ARM64_BIN) run --db $(ARM64_DEMO_DB) --model $(MODEL) --cube lily --num-predict 48 --json "Once upon a time, Lily" > $(ARM64_DEMO_OUT)/restored.json
	$(QEMU_ARM64) $(ARM64_BIN) run --db $(ARM64_DEMO_DB) --model $(MODEL) --cube lily --num-predict 48 --json --no-cache "Once upon a time, Lily" > $(ARM64_DEMO_OUT)/nocache.json
	@cat $(ARM64_DEMO_OUT)/restored.json $(ARM64_DEMO_OUT)/nocache.json
	@out=$(ARM64_DEMO_OUT); \
	resp='s/.*"response":"(([^"\\]|\\.)*)".*/\1/p'; \
	sed -nE "$$resp" $$out/restored.json > $$out/restored.response; \
	sed -nE "$$resp" $$out/nocache.json > $$out/nocache.response; \
	cached=$$(sed -nE 's/.*"cached_tokens":([0-9]+).*/\1/p' $$out/restored.json); \
	[ "$$(wc -l < $$out/restored.json)" -eq 1 ] && [ "$$(wc -l < $$out/nocache.json)" -eq 1 ] || { echo "demo-arm64: FAIL: each run should print one JSON line" >&2; exit 1; }; \
	[ -n "$$(cat $$out/restored.response)" ] || { echo "demo-arm64: FAIL: no response in $$out/restored.json" >&2; exit 1; }; \
	[ -n "$$cached" ] && [ "$$cached" -gt 0 ] || { echo "demo-arm64: FAIL: restored run reports cached_tokens '$$cached' (want > 0)" >&2; exit 1; }; \
	cmp -s $$out/restored.response $$out/nocache.response || { echo "demo-arm64: FAIL: restored and --no-cache responses differ:" >&2; diff $$out/restored.response $$out/nocache.response >&2; exit 1; }; \
	echo "demo-arm64: OK: restored run (cached_tokens $$cached) and --no-cache run give byte-identical responses ($$(wc -c < $$out/restored.response) bytes of JSON string)"

# The soak: a real `memosrt serve` on stories260K under 16 concurrent
# clients for SOAK (SOAK_KILL=1 or SOAK >= 10m: a SIGKILL and restart every
# minute). SOAK_DUMP=FILE writes the server's goroutine dump (SIGQUIT) at
# the first unanswered request.
SOAK ?= 3m
soak: links
	SOAK=$(SOAK) $(GO) test -count=1 -v -timeout 60m -run TestSoak ./bench/soak

# The mixed-traffic soak: `memosrt serve` with its default budgets under 4
# clients on one cube with a pack (chat turns, memory add + search,
# generate, OpenAI streaming chat) for SOAK_MIX; prints data-directory
# bytes, RSS and live heap every 10 s and checks that they level off under
# their bounds (docs/data-directory.md). SOAK_PPROF=DIR saves a heap
# profile per sample.
SOAK_MIX ?= 12m
soak-mix: links
	SOAK_MIX=$(SOAK_MIX) $(GO) test -count=1 -v -timeout 60m -run TestMix ./bench/soak
