package kvgate

import "github.com/memosrt/memosrt/errkind"

var (
	// ErrBadOptions is returned for targets, samples or a codec setting
	// out of range.
	ErrBadOptions = errkind.New(errkind.Invalid, "kvgate: invalid options")
	// ErrNoSeq is returned by Calibrate of composition when the engine
	// has no second free sequence for its scratch (the pool's sequences
	// are in use); nothing is decided, a later calibration tries again.
	ErrNoSeq = errkind.New(errkind.Unavailable, "kvgate: no free scratch sequence for composition")
	// ErrClosed is returned by a Gate's methods after Close.
	ErrClosed = errkind.New(errkind.Unavailable, "kvgate: closed")
)
