// Package kvgate is the calibration gate of the lossy settings of the
// activation tier: per model, adapter set and KV type it measures, on the
// model's own text, how far composed KV (runtime.Engine.ComposeSeq at a
// recompute fraction) and lossy packs (kvcache.Quantize at 8 and 4 bits,
// dequantized and restored) agree with a full prefill, and decides which
// of them may be used. Until a model is calibrated everything runs exact.
//
// Calibrate measures: each sample is two or more chunks of the model's
// greedy text from fixed seed prompts (deterministic, no data set) and a
// query; the reference is a full prefill of the same tokens and its
// greedy continuation. Two figures per setting: top-1 agreement of the
// next token over the query and the teacher-forced continuation, and the
// share of samples whose whole greedy path (24 tokens by default) is the
// reference's. A setting passes when both meet Targets (defaults 99% and
// 90%). Composition gets the smallest passing recompute fraction up to
// Targets.Ceiling, or is turned off; the codec setting "auto" gets the
// smallest passing lossy codec (q4, then q8), else exact. A Decision holds
// the whole table.
//
// Gate keeps the decisions: persisted in the data directory under "g/"
// keyed by the model key (Key: model fingerprint, KV types, adapter set)
// and the targets, so a restart does not calibrate again; each is logged
// once when made. ComposeRatio and Codec answer "not calibrated yet" (ok
// false: run exact) until Start's background calibration of that key has
// finished.
//
// A Gate is safe for concurrent use. Its mutex guards the decision map
// and the set of running calibrations only; calibration runs outside it,
// on one of the engine's own sequences (AcquireSeq; composition takes a
// second as its scratch), one calibration per key at a time.
package kvgate
