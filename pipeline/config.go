package pipeline

import "github.com/memosrt/memosrt/config"

type (
	// Options configure the pipeline: package config's, as package
	// memosrt's Open takes them.
	Options = config.Options
	// ModelSpec names a GGUF file served besides Options.Model.
	ModelSpec = config.ModelSpec
	// UpstreamOptions configure the text-only upstream backend.
	UpstreamOptions = config.UpstreamOptions
)
