package heat

import (
	"errors"
	"fmt"
	"math"
	"sync"
	"time"
)

// Clock tells the scheduler the time; tests move a fake one.
type Clock interface {
	Now() time.Time
}

type systemClock struct{}

func (systemClock) Now() time.Time { return time.Now() }

// SystemClock is the wall clock.
func SystemClock() Clock { return systemClock{} }

// Options are the weights and thresholds of the heat score
//
//	H = α·N_visit + β·L_interaction + γ·R_recency,   R_recency = exp(−Δt/τ)
//
// from MemoryOS (Kang et al. 2025, "Memory OS of AI Agent", §3.3 mid-term
// memory heat), where N_visit counts retrieval hits, L_interaction the turns
// that used the memory and Δt the time since the last access. MemoryOS uses
// α = β = γ = 1, τ = 24 h and promotes at heat 5; those are the defaults.
// Zero means the default for every field.
type Options struct {
	// Alpha weighs N_visit. Default 1.
	Alpha float64
	// Beta weighs L_interaction. Default 1.
	Beta float64
	// Gamma weighs R_recency. Default 1.
	Gamma float64
	// Tau is the recency time constant τ. Default 24 h.
	Tau time.Duration
	// CountTau makes N_visit and L_interaction decay as exp(−Δt/CountTau)
	// since each event. Without decay (RawCounts) a memory that was ever hot
	// stays at least as hot as its counts, so low heat could never demote it;
	// MemoryOS instead resets N_visit on promotion. Default Tau.
	CountTau time.Duration
	// RawCounts turns the count decay off (MemoryOS's plain counts).
	RawCounts bool
	// PromoteAt is the heat at or above which a memory moves text →
	// activation. Default 5 (MemoryOS).
	PromoteAt float64
	// DemoteBelow is the heat under which a memory moves activation → text.
	// Default 1; below PromoteAt, so a memory does not flap.
	DemoteBelow float64
}

// DefaultOptions returns MemoryOS's constants.
func DefaultOptions() Options {
	return Options{Alpha: 1, Beta: 1, Gamma: 1, Tau: 24 * time.Hour, CountTau: 24 * time.Hour, PromoteAt: 5, DemoteBelow: 1}
}

// WithDefaults returns o with every zero field set to its default
// (CountTau defaults to Tau).
func (o Options) WithDefaults() Options {
	d := DefaultOptions()
	if o.Alpha == 0 {
		o.Alpha = d.Alpha
	}
	if o.Beta == 0 {
		o.Beta = d.Beta
	}
	if o.Gamma == 0 {
		o.Gamma = d.Gamma
	}
	if o.Tau == 0 {
		o.Tau = d.Tau
	}
	if o.CountTau == 0 {
		o.CountTau = o.Tau
	}
	if o.PromoteAt == 0 {
		o.PromoteAt = d.PromoteAt
	}
	if o.DemoteBelow == 0 {
		o.DemoteBelow = d.DemoteBelow
	}
	return o
}

// Validate reports every invalid field at once (after defaults).
func (o Options) Validate() error {
	o = o.WithDefaults()
	var errs []error
	if o.Alpha < 0 || o.Beta < 0 || o.Gamma < 0 {
		errs = append(errs, fmt.Errorf("heat weights α %g β %g γ %g must be >= 0", o.Alpha, o.Beta, o.Gamma))
	}
	if o.Tau < 0 || o.CountTau < 0 {
		errs = append(errs, fmt.Errorf("Tau %v and CountTau %v must be > 0", o.Tau, o.CountTau))
	}
	if o.DemoteBelow > o.PromoteAt {
		errs = append(errs, fmt.Errorf("DemoteBelow %g > PromoteAt %g", o.DemoteBelow, o.PromoteAt))
	}
	return errors.Join(errs...)
}

// Usage is the persisted access record of one memory or pack. Counts are
// stored as of At and decay from there (see Options.CountTau).
type Usage struct {
	Visits       float64   `json:"v"`    // N_visit at At
	Interactions float64   `json:"i"`    // L_interaction at At
	At           time.Time `json:"at"`   // when the counts were last brought up to date
	Last         time.Time `json:"last"` // last access (visit or interaction)
}

// decay brings the counts to now.
func (u Usage) decay(o Options, now time.Time) Usage {
	if o.RawCounts || u.At.IsZero() || !now.After(u.At) {
		if u.At.IsZero() {
			u.At = now
		}
		return u
	}
	f := math.Exp(-float64(now.Sub(u.At)) / float64(o.CountTau))
	u.Visits *= f
	u.Interactions *= f
	u.At = now
	return u
}

// Use records visits retrieval hits and interactions turns that used the
// memory at now. Negative counts (feedback that the memory misled) take
// counts away, never below 0, and leave Last.
func (u Usage) Use(o Options, now time.Time, visits, interactions int) Usage {
	u = u.decay(o, now)
	u.Visits = max(0, u.Visits+float64(visits))
	u.Interactions = max(0, u.Interactions+float64(interactions))
	if visits > 0 || interactions > 0 {
		u.Last = now
	}
	return u
}

// Heat returns H at now. A memory never accessed has heat 0.
func (u Usage) Heat(o Options, now time.Time) float64 {
	if u.Last.IsZero() {
		return 0
	}
	d := u.decay(o, now)
	dt := max(0, now.Sub(u.Last))
	return o.Alpha*d.Visits + o.Beta*d.Interactions + o.Gamma*math.Exp(-float64(dt)/float64(o.Tau))
}

// OffsetClock is the wall clock moved forward by Advance: a test moves a
// real server's heat through days (memosrt serve --debug-clock). Safe for
// concurrent use.
type OffsetClock struct {
	mu  sync.Mutex
	off time.Duration
}

// Now returns the wall clock plus the advances so far.
func (c *OffsetClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return time.Now().Add(c.off)
}

// Advance moves the clock forward by d.
func (c *OffsetClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.off += d
}
