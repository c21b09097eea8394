package textmem

import (
	"context"
	"errors"
	"fmt"
)

// CubeCheck is what Check found in one cube.
type CubeCheck struct {
	Cube     string
	Memories int // memory records that read back whole
	// Damaged are the keys (t/<cube>/m/<id>, h/..., as ErrDamaged names
	// them) of memory and history records that fail: their text cannot
	// be saved.
	Damaged []string
	// Index are the keys of index records (postings, doc records,
	// statistics, content hashes, vectors) that fail: Repair recomputes
	// postings, doc records and statistics from the texts.
	Index []string
	// Missing is how many memories the cube's statistics count beyond the
	// records found: lost with a damaged SST block, whose keys Badger's
	// reads skip without an error.
	Missing int
}

// OK reports whether the cube has no damage.
func (c CubeCheck) OK() bool { return len(c.Damaged) == 0 && len(c.Index) == 0 && c.Missing == 0 }

// Check reads every record of cube, verifying each (ErrDamaged), and
// compares the memories found with the count its statistics keep.
// Errors other than damage (I/O, ctx) are returned; damage is in the
// result.
func (s *Store) Check(ctx context.Context, cube string) (CubeCheck, error) {
	c := CubeCheck{Cube: cube}
	if err := checkCube(cube); err != nil {
		return c, err
	}
	if err := s.checkOpen(); err != nil {
		return c, err
	}
	var keys [][]byte
	err := s.be.View(ctx, cube, func(txn Txn) error {
		if err := txn.Iterate(nil, true, func(k, _ []byte) error {
			keys = append(keys, append([]byte(nil), k...))
			return nil
		}); err != nil {
			return err
		}
		var st cubeStats
		hasStats := false
		for _, k := range keys {
			v, err := txn.Get(k)
			if errors.Is(err, ErrKeyNotFound) {
				continue
			}
			if errors.Is(err, ErrDamaged) {
				if k[0] == nsMem || k[0] == nsHist {
					c.Damaged = append(c.Damaged, string(cubeKeyPrefix(cube))+string(k))
				} else {
					c.Index = append(c.Index, string(cubeKeyPrefix(cube))+string(k))
				}
				continue
			}
			if err != nil {
				return err
			}
			switch {
			case k[0] == nsMem:
				c.Memories++
			case len(k) == 1 && k[0] == nsStats:
				if st, err = decodeStats(v); err != nil {
					c.Index = append(c.Index, string(cubeKeyPrefix(cube))+string(k))
				} else {
					hasStats = true
				}
			}
		}
		if !hasStats { // read by key: an iteration stops at a damaged SST block
			v, err := txn.Get(statsKey())
			switch {
			case errors.Is(err, ErrDamaged):
				c.Index = append(c.Index, string(cubeKeyPrefix(cube))+string(statsKey()))
			case err == nil:
				if st, err = decodeStats(v); err == nil {
					hasStats = true
				}
			case !errors.Is(err, ErrKeyNotFound):
				return err
			}
		}
		var damagedMem int
		for _, k := range c.Damaged {
			if k[len(cubeKeyPrefix(cube))] == nsMem {
				damagedMem++
			}
		}
		if hasStats && st.docs > uint64(c.Memories+damagedMem) {
			c.Missing = int(st.docs) - c.Memories - damagedMem
		}
		return nil
	})
	if err != nil {
		return c, fmt.Errorf("textmem: check cube %s: %w", cube, err)
	}
	return c, nil
}

// RepairIndex recomputes cube's postings, doc records and statistics from
// the memory records that read back (damaged ones are left out, and left
// in place: their text cannot be saved, Get keeps reporting them), and
// reloads its index. Returns the memories indexed.
func (s *Store) RepairIndex(ctx context.Context, cube string) (int, error) {
	if err := checkCube(cube); err != nil {
		return 0, err
	}
	if err := s.checkOpen(); err != nil {
		return 0, err
	}
	s.mu.Lock()
	ix := s.cubes[cube]
	if ix == nil {
		ix = newCubeIndex(s.vectorIndexMaker())
		s.cubes[cube] = ix
	}
	s.mu.Unlock()
	ix.writeMu.Lock()
	defer ix.writeMu.Unlock()
	if err := s.rebuild(ctx, cube); err != nil {
		return 0, err
	}
	if err := s.load(ctx, cube, ix); err != nil {
		return 0, err
	}
	ix.mu.RLock()
	defer ix.mu.RUnlock()
	return ix.live, nil
}
