package kvcache

import "errors"

// DeleteLabel removes every pack labelled label (for example all packs of a
// cube when the cube is deleted) and returns how many it removed. Packs
// under other labels are untouched. A pack stored by a concurrent Put under
// label may survive; call DeleteLabel after the writers of label stopped.
func (c *Cache) DeleteLabel(label string) (int, error) {
	c.mu.Lock()
	var ids []string
	for id, rec := range c.packs {
		if rec.Header.Label == label {
			ids = append(ids, id)
		}
	}
	c.mu.Unlock()
	n := 0
	for _, id := range ids {
		switch err := c.Delete(id); {
		case err == nil:
			n++
		case errors.Is(err, ErrNotFound): // deleted meanwhile
		default:
			return n, err
		}
	}
	return n, nil
}
