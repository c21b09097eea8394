package convmem

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/memosrt/memosrt/textmem"
)

// Profile is a cube's long-term memory (MemoryOS's user profile and
// knowledge): Facts holds stable facts about the user, Preferences the
// user's preferences (TypePreference, apart as MemOS keeps its pref_mem),
// Knowledge the other extracted memories (events, opinions, procedures).
// Each item names the textmem memory it stands for.
type Profile struct {
	Facts       []ProfileItem `json:"facts"`
	Preferences []ProfileItem `json:"preferences"`
	Knowledge   []ProfileItem `json:"knowledge"`
	Updated     time.Time     `json:"updated,omitzero"`
}

// split moves preferences a profile stored before Preferences existed
// (they were among Facts) into Preferences, in order.
func (p *Profile) split() {
	for _, it := range p.Facts {
		if it.Type == TypePreference {
			p.Preferences = append(p.Preferences, it)
		}
	}
	p.Facts = slices.DeleteFunc(p.Facts, func(x ProfileItem) bool { return x.Type == TypePreference })
}

// ProfileItem is one entry of a Profile.
type ProfileItem struct {
	MemoryID   string    `json:"memory_id"`
	Text       string    `json:"text"`
	Type       string    `json:"type"`
	Confidence float64   `json:"confidence"`
	Session    string    `json:"session,omitempty"`
	Updated    time.Time `json:"updated"`
}

// ProfileType reports whether memories of type t belong to a profile's
// Facts or Preferences (facts and preferences) rather than its Knowledge.
func ProfileType(t string) bool { return t == TypeFact || t == TypePreference }

// Profile returns cube's profile (empty if none yet).
func (s *Store) Profile(ctx context.Context, cube string) (Profile, error) {
	var p Profile
	err := s.be.View(ctx, cube, func(txn textmem.Txn) error {
		p = Profile{}
		if err := getJSON(txn, kProfile, &p); err != nil && !errors.Is(err, ErrNotFound) {
			return err
		}
		p.split()
		return nil
	})
	return p, err
}

// UpdateProfile merges items into cube's profile: an item replaces the
// entry of the same MemoryID (or joins its list, newest last); each list
// keeps its newest Options.MaxProfileItems entries.
func (s *Store) UpdateProfile(ctx context.Context, cube string, items []ProfileItem) (Profile, error) {
	now := s.opts.Now().UTC()
	var p Profile
	err := s.be.Update(ctx, cube, func(txn textmem.Txn) error {
		p = Profile{}
		if err := getJSON(txn, kProfile, &p); err != nil && !errors.Is(err, ErrNotFound) {
			return err
		}
		p.split()
		for _, it := range items {
			if it.Updated.IsZero() {
				it.Updated = now
			}
			for _, l := range []*[]ProfileItem{&p.Facts, &p.Preferences, &p.Knowledge} {
				*l = slices.DeleteFunc(*l, func(x ProfileItem) bool { return x.MemoryID == it.MemoryID })
			}
			switch it.Type {
			case TypePreference:
				p.Preferences = append(p.Preferences, it)
			case TypeFact:
				p.Facts = append(p.Facts, it)
			default:
				p.Knowledge = append(p.Knowledge, it)
			}
		}
		for _, l := range []*[]ProfileItem{&p.Facts, &p.Preferences, &p.Knowledge} {
			if n := len(*l) - s.opts.MaxProfileItems; n > 0 {
				*l = (*l)[n:]
			}
		}
		p.Updated = now
		return setJSON(txn, kProfile, p)
	})
	return p, err
}

// ProfileForget removes memory id from cube's profile, or sets its text
// when text is not empty (the memory changed).
func (s *Store) ProfileForget(ctx context.Context, cube, id, text string) error {
	return s.be.Update(ctx, cube, func(txn textmem.Txn) error {
		var p Profile
		switch err := getJSON(txn, kProfile, &p); {
		case errors.Is(err, ErrNotFound):
			return nil
		case err != nil:
			return err
		}
		changed := false
		for _, l := range []*[]ProfileItem{&p.Facts, &p.Preferences, &p.Knowledge} {
			for i := range *l {
				if (*l)[i].MemoryID == id && text != "" && (*l)[i].Text != text {
					(*l)[i].Text, changed = text, true
				}
			}
			if text == "" {
				n := len(*l)
				*l = slices.DeleteFunc(*l, func(x ProfileItem) bool { return x.MemoryID == id })
				changed = changed || len(*l) != n
			}
		}
		if !changed {
			return nil
		}
		return setJSON(txn, kProfile, p)
	})
}

// Job states.
const (
	JobQueued  = "queued"
	JobRunning = "running"
	JobDone    = "done"
	JobFailed  = "failed"
	JobUndone  = "undone"
	// JobMerged is a session's consolidation job whose turns a later job
	// for the same session took over before it ran (Job.MergedInto):
	// nothing extracted by it.
	JobMerged = "merged"
)

// Job is a persisted extraction job: memories extracted from Turns (of
// Session when it consolidates one).
type Job struct {
	ID      string   `json:"id"`
	Cube    string   `json:"cube"`
	State   string   `json:"state"`
	Turns   []string `json:"turns"`
	Session string   `json:"session,omitempty"`
	// By says what extracts: "model" (the served model, its output held to
	// ExtractSchema) or "extractive" (no model: Extractive); "feedback" for
	// the record of a feedback's write (done when stored, no turns).
	By string `json:"by,omitempty"`
	// Response is the answer a feedback job corrects (ResponseRecord.ID).
	Response string    `json:"response,omitempty"`
	Created  time.Time `json:"created"`
	Started  time.Time `json:"started,omitzero"`
	Finished time.Time `json:"finished,omitzero"`
	// Undone is when UndoJob undid it.
	Undone time.Time `json:"undone,omitzero"`
	// MergedInto is the job that took over this one's turns (JobMerged).
	MergedInto string `json:"merged_into,omitempty"`
	Attempts   int    `json:"attempts"`
	// Output is the model's raw output (at most 4 KiB), kept for a failed
	// job's record.
	Output  string      `json:"output,omitempty"`
	Error   string      `json:"error,omitempty"`
	Results []JobResult `json:"results,omitempty"`
	Dropped []Dropped   `json:"dropped,omitempty"`
}

// Operations of a JobResult.
const (
	OpAdd       = "add"       // a new memory
	OpSame      = "same"      // an identical memory existed: nothing stored
	OpSupersede = "supersede" // a contradicted memory took the new text as its next version
)

// JobResult is what a job did to one memory.
type JobResult struct {
	// Cube is where the memory was written when not the job's cube (a
	// procedure routed to the assistant's cube, Route).
	Cube     string `json:"cube,omitempty"`
	MemoryID string `json:"memory_id"`
	Op       string `json:"op"`
	Text     string `json:"text"`
	Type     string `json:"type"`
	Version  int    `json:"version"`
	// PrevText, PrevKind, PrevSource and PrevVersion are the superseded
	// memory's (OpSupersede), for undo.
	PrevText    string `json:"prev_text,omitempty"`
	PrevKind    string `json:"prev_kind,omitempty"`
	PrevSource  string `json:"prev_source,omitempty"`
	PrevVersion int    `json:"prev_version,omitempty"`
}

// NewJob returns a queued job for turns of cube, not yet stored.
func (s *Store) NewJob(cube string, turns []string, session string) Job {
	return Job{ID: s.newID(), Cube: cube, State: JobQueued, Turns: slices.Clone(turns), Session: session,
		Created: s.opts.Now().UTC()}
}

// PutJob stores j (its ID and Cube set).
func (s *Store) PutJob(ctx context.Context, j Job) error {
	if j.ID == "" || j.Cube == "" {
		return errors.New("convmem: a job without id or cube")
	}
	if len(j.Output) > 4096 {
		j.Output = truncUTF8(j.Output, 4096)
	}
	return s.be.Update(ctx, j.Cube, func(txn textmem.Txn) error { return setJSON(txn, pJob+j.ID, j) })
}

// Job returns job id of cube; ErrNotFound if none.
func (s *Store) Job(ctx context.Context, cube, id string) (Job, error) {
	var j Job
	err := s.be.View(ctx, cube, func(txn textmem.Txn) error { return getJSON(txn, pJob+id, &j) })
	return j, err
}

// Jobs returns cube's jobs, oldest first.
func (s *Store) Jobs(ctx context.Context, cube string) ([]Job, error) {
	var out []Job
	err := s.be.View(ctx, cube, func(txn textmem.Txn) (err error) {
		out, err = scan[Job](txn, pJob)
		return err
	})
	return out, err
}

// Unfinished returns every queued or running job of every cube, oldest
// first within a cube: the jobs to resume after a restart.
func (s *Store) Unfinished(ctx context.Context) ([]Job, error) {
	cubes, err := s.be.Cubes(ctx, []byte(pJob))
	if err != nil {
		return nil, err
	}
	slices.Sort(cubes)
	var out []Job
	for _, c := range cubes {
		js, err := s.Jobs(ctx, c)
		if err != nil {
			return nil, err
		}
		for _, j := range js {
			if j.State == JobQueued || j.State == JobRunning {
				out = append(out, j)
			}
		}
	}
	return out, nil
}

// Change is one entry of a memory's change log.
type Change struct {
	Time time.Time `json:"time"`
	// Op is add, same, update, supersede, expire, delete or undo.
	Op string `json:"op"`
	// By is who changed it: "api", "extract:<job id>", "expiry", ...
	By string `json:"by"`
	// Why says why, in words.
	Why     string `json:"why,omitempty"`
	Text    string `json:"text,omitempty"`
	Version int    `json:"version,omitempty"`
}

var logSeq atomic.Uint32

// Log appends c (Time set to now if zero) to memory id's change log.
func (s *Store) Log(ctx context.Context, cube, id string, c Change) error {
	if c.Time.IsZero() {
		c.Time = s.opts.Now().UTC()
	}
	key := fmt.Sprintf("%s%s/%016x%08x", pLog, id, uint64(c.Time.UnixNano()), logSeq.Add(1))
	return s.be.Update(ctx, cube, func(txn textmem.Txn) error { return setJSON(txn, key, c) })
}

// Changes returns memory id's change log, oldest first.
func (s *Store) Changes(ctx context.Context, cube, id string) ([]Change, error) {
	var out []Change
	err := s.be.View(ctx, cube, func(txn textmem.Txn) (err error) {
		out, err = scan[Change](txn, pLog+id+"/")
		return err
	})
	return out, err
}

// SetExpiry records that memory id of cube expires at at (zero: never),
// replacing an earlier expiry.
func (s *Store) SetExpiry(ctx context.Context, cube, id string, at time.Time) error {
	return s.be.Update(ctx, cube, func(txn textmem.Txn) error {
		if err := clearExpiry(txn, id); err != nil {
			return err
		}
		if at.IsZero() {
			return nil
		}
		ns := fmt.Sprintf("%016x", uint64(at.UnixNano()))
		if err := txn.Set([]byte(pExpiry+ns+"/"+id), nil); err != nil {
			return err
		}
		return txn.Set([]byte(pExpOf+id), []byte(ns))
	})
}

func clearExpiry(txn textmem.Txn, id string) error {
	old, err := txn.Get([]byte(pExpOf + id))
	switch {
	case errors.Is(err, textmem.ErrKeyNotFound):
		return nil
	case err != nil:
		return err
	}
	if err := txn.Delete([]byte(pExpiry + string(old) + "/" + id)); err != nil {
		return err
	}
	return txn.Delete([]byte(pExpOf + id))
}

// Expiry returns when memory id expires (zero: never).
func (s *Store) Expiry(ctx context.Context, cube, id string) (time.Time, error) {
	var at time.Time
	err := s.be.View(ctx, cube, func(txn textmem.Txn) error {
		at = time.Time{}
		b, err := txn.Get([]byte(pExpOf + id))
		switch {
		case errors.Is(err, textmem.ErrKeyNotFound):
			return nil
		case err != nil:
			return err
		}
		ns, err := strconv.ParseUint(string(b), 16, 64)
		if err != nil {
			return err
		}
		at = time.Unix(0, int64(ns)).UTC()
		return nil
	})
	return at, err
}

// Expired returns the memories of cube whose expiry is at or before now,
// soonest first.
func (s *Store) Expired(ctx context.Context, cube string, now time.Time) ([]string, error) {
	lim := fmt.Sprintf("%016x", uint64(now.UnixNano()))
	var out []string
	err := s.be.View(ctx, cube, func(txn textmem.Txn) error {
		out = nil
		return txn.Iterate([]byte(pExpiry), true, func(k, _ []byte) error {
			rest := string(k[len(pExpiry):])
			if len(rest) < 17 || rest[:16] > lim {
				return errStop
			}
			out = append(out, rest[17:])
			return nil
		})
	})
	if errors.Is(err, errStop) {
		err = nil
	}
	return out, err
}

var errStop = errors.New("stop")

// ExpiringCubes returns the cubes with at least one memory that expires.
func (s *Store) ExpiringCubes(ctx context.Context) ([]string, error) {
	return s.be.Cubes(ctx, []byte(pExpiry))
}

// ClearExpiry forgets memory id's expiry (it was deleted).
func (s *Store) ClearExpiry(ctx context.Context, cube, id string) error {
	return s.be.Update(ctx, cube, func(txn textmem.Txn) error { return clearExpiry(txn, id) })
}
