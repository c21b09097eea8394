package scheduler

// KVUse returns the committed tier packs' KV bytes of every cube
// (decompressed, as KVBytes counts them) and the budget (Options.KVBytes).
func (t *Tiers) KVUse() (used, budget int64, err error) {
	if err := t.checkOpen(); err != nil {
		return 0, t.opts.KVBytes, err
	}
	used, err = t.kvBytes("")
	return used, t.opts.KVBytes, err
}
