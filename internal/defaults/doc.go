// Package defaults holds, in one table, the sampler settings memosrt's
// front ends use for what a request leaves out: the Ollama and OpenAI
// routes of package server each follow their API's documented defaults,
// and `memosrt run` has its own flag defaults.
package defaults
