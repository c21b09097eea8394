package server

import (
	"errors"
	"fmt"
	"log/slog"
	"time"
)

// Options configure a Server. Zero means the default given.
type Options struct {
	// Token, when set, is required as "Authorization: Bearer <Token>" on
	// every request.
	Token string
	// LocalToken, when set, is accepted like Token: the secret `memosrt
	// serve` writes into the data directory for the CLI next to it.
	LocalToken string
	// Version is memosrt's version, reported by GET /v1/server and as
	// "memosrt" by /api/version. Default "0.0.0".
	Version string
	// Instance, when set, is reported by GET /v1/server: an opaque id that
	// lets a client tell this server from another one on the same address
	// (the CLI checks the one `memosrt serve` recorded in its data dir).
	Instance string
	// MaxBodyBytes bounds a request body, bytes; larger gets 413.
	// Default 8 MiB.
	MaxBodyBytes int64
	// MaxImportBytes bounds an imported cube archive, bytes. Default 4 GiB.
	MaxImportBytes int64
	// BodyReadTimeout bounds the time a client has to send a request body,
	// from the end of its headers to the body's last byte; a body not
	// complete by then is answered 408 and its connection closed. It ends
	// with the body: a streamed answer runs as long as it needs. Default
	// 60s (a 8 MiB body at about 140 KiB/s); negative: no deadline.
	BodyReadTimeout time.Duration
	// ImportReadTimeout is BodyReadTimeout for POST /v1/cubes/import,
	// whose archive may be up to MaxImportBytes. Default 1h; negative: no
	// deadline.
	ImportReadTimeout time.Duration
	// DebugClock, when set, serves POST /v1/debug/clock {"advance_s": N}
	// to move it (tests of heat over days through a real server).
	DebugClock interface{ Advance(d time.Duration) }
	// Logger receives request logs; nil discards.
	Logger *slog.Logger
	// Now is the clock for response timestamps. Default time.Now.
	Now func() time.Time
}

// DefaultOptions returns Options with every default filled in.
func DefaultOptions() Options {
	return Options{Version: "0.0.0", MaxBodyBytes: 8 << 20, MaxImportBytes: 4 << 30, BodyReadTimeout: time.Minute,
		ImportReadTimeout: time.Hour, Now: time.Now}
}

func (o *Options) ensureDefaults() {
	d := DefaultOptions()
	if o.Version == "" {
		o.Version = d.Version
	}
	if o.MaxBodyBytes == 0 {
		o.MaxBodyBytes = d.MaxBodyBytes
	}
	if o.MaxImportBytes == 0 {
		o.MaxImportBytes = d.MaxImportBytes
	}
	if o.BodyReadTimeout == 0 {
		o.BodyReadTimeout = d.BodyReadTimeout
	}
	if o.ImportReadTimeout == 0 {
		o.ImportReadTimeout = d.ImportReadTimeout
	}
	if o.Now == nil {
		o.Now = d.Now
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
}

// Validate reports every problem at once.
func (o Options) Validate() error {
	var errs []error
	if o.MaxBodyBytes < 0 {
		errs = append(errs, fmt.Errorf("MaxBodyBytes %d < 0", o.MaxBodyBytes))
	}
	if o.MaxImportBytes < 0 {
		errs = append(errs, fmt.Errorf("MaxImportBytes %d < 0", o.MaxImportBytes))
	}
	if len(errs) > 0 {
		return fmt.Errorf("%w: %w", ErrBadOptions, errors.Join(errs...))
	}
	return nil
}
