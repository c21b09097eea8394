// Package llamaembed is the in-process embed.Embedder over a loaded
// llama.cpp model. It lives apart from package embed so that embed (and the
// text tier above it) stays pure Go: this package pulls in cgo.
package llamaembed
