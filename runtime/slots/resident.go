package slots

import (
	"sync"
	"time"
)

// ResidentPack is a cube's pack held in a resident sequence.
type ResidentPack struct {
	Seq      int
	Adapters string  // adapter set the pack was computed under (runtime.AdapterKey)
	Toks     []int32 // the pack's tokens: the cells it holds
	PackID   string  // the stored pack it was restored from
	Created  time.Time
	Used     time.Time // last shared into a request (Use)
}

// Resident is the resident level: at most one pack per cube held in its
// own sequence, from a fixed set of resident sequences. Its cells are the
// Pool's Fixed cells; Evict drops packs least recently used first. Safe
// for concurrent use; its lock is taken after Pool.mu (Evict runs under
// it) and before the engine's (clear).
type Resident struct {
	mu    sync.Mutex
	packs map[string]*ResidentPack // by cube
	free  []int                    // resident sequences holding no pack
	clear func(seq int)
	// evicted is told of the cubes whose packs Evict dropped, after it
	// released its lock and still under Pool.mu: it must not block.
	evicted func(cubes []string)
}

// NewResident returns a resident level over seqs, emptying a sequence
// with clear when its pack leaves; evicted (nil: none) is told of the
// cubes Evict dropped, under the Pool's lock: it must not block.
func NewResident(seqs []int, clear func(seq int), evicted func(cubes []string)) *Resident {
	return &Resident{packs: map[string]*ResidentPack{}, free: append([]int(nil), seqs...), clear: clear, evicted: evicted}
}

// Cells returns the KV cells resident packs hold.
func (r *Resident) Cells() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, p := range r.packs {
		n += len(p.Toks)
	}
	return n
}

// Evict drops resident packs, least recently used first, until n cells
// are free, and returns the cells freed.
func (r *Resident) Evict(n int) int {
	r.mu.Lock()
	freed := 0
	var gone []string
	for freed < n && len(r.packs) > 0 {
		var lru string
		for c, p := range r.packs {
			if lru == "" || p.Used.Before(r.packs[lru].Used) {
				lru = c
			}
		}
		freed += len(r.packs[lru].Toks)
		r.dropLocked(lru)
		gone = append(gone, lru)
	}
	r.mu.Unlock()
	if len(gone) > 0 && r.evicted != nil {
		r.evicted(gone)
	}
	return freed
}

// NoEvict is the level's cells without eviction: a reservation that must
// not cost other resident packs (making a pack resident).
func (r *Resident) NoEvict() Fixed { return noEvict{r} }

type noEvict struct{ r *Resident }

func (n noEvict) Cells() int    { return n.r.Cells() }
func (n noEvict) Evict(int) int { return 0 }

// Use returns a copy of cube's pack if it was computed under adapters,
// and marks it used now.
func (r *Resident) Use(cube, adapters string) (ResidentPack, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	p, ok := r.packs[cube]
	if !ok || p.Adapters != adapters {
		return ResidentPack{}, false
	}
	p.Used = time.Now()
	return *p, true
}

// Get returns a copy of cube's pack, if any.
func (r *Resident) Get(cube string) (ResidentPack, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if p, ok := r.packs[cube]; ok {
		return *p, true
	}
	return ResidentPack{}, false
}

// Len returns the number of resident packs.
func (r *Resident) Len() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.packs)
}

// Drop frees cube's pack, if any; it reports whether there was one.
func (r *Resident) Drop(cube string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, ok := r.packs[cube]; !ok {
		return false
	}
	r.dropLocked(cube)
	return true
}

func (r *Resident) dropLocked(cube string) {
	p := r.packs[cube]
	delete(r.packs, cube)
	r.clear(p.Seq)
	r.free = append(r.free, p.Seq)
}

// Leave frees every pack keep refuses (by cube and pack id) and returns
// their cubes.
func (r *Resident) Leave(keep func(cube, packID string) bool) []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for cube, p := range r.packs {
		if !keep(cube, p.PackID) {
			out = append(out, cube)
		}
	}
	for _, cube := range out {
		r.dropLocked(cube)
	}
	return out
}

// Take returns a free resident sequence; false when none is free. The
// caller fills it and gives it to Set, or back with Return.
func (r *Resident) Take() (int, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := len(r.free)
	if n == 0 {
		return 0, false
	}
	seq := r.free[n-1]
	r.free = r.free[:n-1]
	return seq, true
}

// Return gives back a sequence from Take that holds no pack.
func (r *Resident) Return(seq int) {
	r.mu.Lock()
	r.free = append(r.free, seq)
	r.mu.Unlock()
}

// Set makes p, whose sequence came from Take, cube's resident pack.
func (r *Resident) Set(cube string, p ResidentPack) {
	r.mu.Lock()
	r.packs[cube] = &p
	r.mu.Unlock()
}
