package embed

import "errors"

var (
	// ErrShape is returned when a model returns a number of vectors or a
	// vector length other than expected.
	ErrShape = errors.New("embed: wrong vector shape")
	// ErrBadVector is returned for a vector holding NaN or ±Inf, or all
	// zeros (Valid).
	ErrBadVector = errors.New("embed: unusable vector")

	// ErrOptions is returned by constructors whose Options fail Validate.
	ErrOptions = errors.New("embed: bad options")
)
