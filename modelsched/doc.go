// Package modelsched keeps the set of models an OS serves and which of them
// are loaded, in the role of Ollama's server/sched.go: a model loads on
// its first use, stays loaded for its keep-alive after its last use, and
// the least recently used idle models are unloaded to make room when
// loading another would pass the count or byte budget.
//
// What a loaded model is (an engine, its slots, its adapters) is the
// caller's: a Set is generic over that value L, and loads, unloads and
// announces a load through the hooks in Options (Load, Unload, Loaded,
// Check), which memosrt's OS sets. Tests drive a Set with any L.
//
// Main types: Set (safe for concurrent use), Model (one served model;
// its fields are read-only to callers), Spec, State.
//
// Locking: one mutex per Set guards every Model's load state. It is never
// held while a hook runs: Load and Unload run with the model marked in
// transition, and other users of the model wait for the transition to end.
package modelsched
