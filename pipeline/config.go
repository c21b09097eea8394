package pipeline

import (
	"github.com/memosrt/memosrt/config"
	"github.com/memosrt/memosrt/modelsched"
)

type (
	// Options configure the pipeline: package config's, as package
	// memosrt's Open takes them.
	Options = config.Options
	// ModelSpec names a GGUF file served besides Options.Model.
	ModelSpec = config.ModelSpec
	// UpstreamOptions configure the text-only upstream backend (package
	// upstream: Ollama or OpenAI-compatible).
	UpstreamOptions = config.UpstreamOptions
	// ModelInfo describes a served model.
	ModelInfo = modelsched.ModelInfo
	// ModelState is a served model and whether it is loaded now.
	ModelState = modelsched.ModelState
)
