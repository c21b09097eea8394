// Package bench holds memosrt's benchmarks: TTFT with and without a restored
// KV prefix (TTFT), the LoCoMo recall benchmark (bench/recall) and the
// random-weight GGUF generator for realistic model shapes (bench/gguf).
// Speed targets live here, never in timed unit tests.
package bench
