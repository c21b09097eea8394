//go:build !linux

package kvcache

// newState returns a zeroed buffer of n bytes for a decoded state (huge
// pages are asked for on Linux only).
func newState(n int) []byte { return make([]byte, n) }
