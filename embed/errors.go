package embed

import (
	"errors"

	"github.com/memosrt/memosrt/errkind"
)

var (
	// ErrShape is returned when a model returns a number of vectors or a
	// vector length other than expected.
	ErrShape = errkind.New(errkind.Upstream, "embed: wrong vector shape")
	// ErrBadVector is returned for a vector holding NaN or ±Inf, or all
	// zeros (Valid).
	ErrBadVector = errkind.New(errkind.Upstream, "embed: unusable vector")

	// ErrOptions is returned by constructors whose Options fail Validate.
	ErrOptions = errors.New("embed: bad options")
)
