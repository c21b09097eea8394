// Package testmodels locates the shared test models (../shared/models beside
// the repository, or $MEMOSRT_MODELS) for tests and benchmarks.
package testmodels
