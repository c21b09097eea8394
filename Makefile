# memosrt build. `make` builds bin/memosrt; `make test` runs the whole suite.
# CPU flags: MARCH=native by default; MARCH=x86-64-v3 for a portable build.
MARCH    ?= native
OPT      ?= -O3
# ollama's module ships ggml-cpu without its AMX sources (no Go file in ggml-cpu/amx),
# so AMX is kept off even where -march=native would enable it.
NOAMX    := $(if $(filter x86_64,$(shell uname -m)),-mno-amx-tile -mno-amx-int8 -mno-amx-bf16)
CGO_CFLAGS   ?= $(OPT) -march=$(MARCH) $(NOAMX) -fopenmp -DGGML_USE_OPENMP
CGO_CXXFLAGS ?= $(OPT) -march=$(MARCH) $(NOAMX) -fopenmp -DGGML_USE_OPENMP
CGO_LDFLAGS  ?= -fopenmp
export CGO_ENABLED=1
export CGO_CFLAGS CGO_CXXFLAGS CGO_LDFLAGS

GO       ?= go
OLLAMA   := github.com/ollama/ollama
TESTFLAGS ?= -count=1 -timeout 40m

.PHONY: all build links test vet bench clean

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

test: links vet
	$(GO) test $(TESTFLAGS) ./...

bench: build
	$(GO) test -run '^$$' -bench . -benchtime 1x ./bench/...

clean:
	rm -rf bin third_party
