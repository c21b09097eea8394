package stats

import (
	"cmp"
	"slices"
)

// Median returns the middle value of v (the upper middle for an even
// count; v is not reordered), or the zero value for an empty v.
func Median[T cmp.Ordered](v []T) T {
	var zero T
	if len(v) == 0 {
		return zero
	}
	s := slices.Clone(v)
	slices.Sort(s)
	return s[len(s)/2]
}
