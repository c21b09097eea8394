package recall

import "errors"

// ErrBadLoCoMo is returned by Run when the LoCoMo file is not a JSON array
// of samples in the locomo10.json format.
var ErrBadLoCoMo = errors.New("recall: bad locomo file")
