package convmem

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/memosrt/memosrt/errkind"
	"github.com/memosrt/memosrt/textmem"
)

// Errors.
var (
	// ErrNotFound is returned for a turn, session or job a cube does not
	// hold.
	ErrNotFound = errkind.New(errkind.NotFound, "convmem: not found")
	// ErrBadOptions is returned by Open for invalid Options.
	ErrBadOptions = errors.New("convmem: bad options")
)

// Options configure a Store; zero values mean the defaults named.
type Options struct {
	// ShortTermLen is the most turns a cube's short-term queue holds;
	// default 10 (MemoryOS's short_term_capacity).
	ShortTermLen int
	// MoveLen is how many of the oldest turns move to a session when the
	// queue overflows; default ShortTermLen/2 (at least the overflow).
	MoveLen int
	// SessionGap is the longest pause within one session: turns further
	// apart (by Turn.Time) never share a session, so a session is a topic
	// of one conversation rather than of a user's whole history (common
	// words, names above all, would otherwise make every group similar
	// enough to join). Default 1 h.
	SessionGap time.Duration
	// JoinAt is the cosine similarity of term counts at or above which a
	// group of turns joins an existing session instead of starting one;
	// default 0.3. MemoryOS joins at 0.6 of its embedding plus keyword
	// score; term counts of a few turns are sparser, so the bar is lower.
	JoinAt float64
	// HeatAt is the session heat at which it is due for consolidation into
	// the long-term profile; default 5 (MemoryOS's mid-term heat threshold).
	HeatAt float64
	// Tau is the recency time constant τ of Heat; default 1e7 s (MemoryOS's
	// recency decay).
	Tau time.Duration
	// MaxProfileItems bounds each list of a Profile; default 64, the
	// oldest leaving first.
	MaxProfileItems int
	// Analyzer splits texts into terms for similarity and keywords;
	// default textmem.EnglishAnalyzer.
	Analyzer textmem.Analyzer
	// Now is the clock; default time.Now.
	Now    func() time.Time
	Logger *slog.Logger
}

// Validate reports every invalid field at once.
func (o Options) Validate() error {
	var errs []error
	if o.ShortTermLen < 0 || o.MoveLen < 0 || o.MaxProfileItems < 0 {
		errs = append(errs, errors.New("ShortTermLen, MoveLen and MaxProfileItems must be >= 0"))
	}
	stl := o.ShortTermLen
	if stl == 0 {
		stl = 10 // the default: a larger MoveLen would move more turns than the queue holds
	}
	if o.MoveLen > 0 && stl > 0 && o.MoveLen > stl {
		errs = append(errs, fmt.Errorf("MoveLen %d above ShortTermLen %d", o.MoveLen, stl))
	}
	if o.JoinAt < 0 || o.JoinAt > 1 || math.IsNaN(o.JoinAt) {
		errs = append(errs, fmt.Errorf("JoinAt %v outside [0, 1]", o.JoinAt))
	}
	if o.HeatAt < 0 || math.IsNaN(o.HeatAt) || o.Tau < 0 || o.SessionGap < 0 {
		errs = append(errs, errors.New("HeatAt and Tau must be >= 0"))
	}
	if len(errs) > 0 {
		return fmt.Errorf("%w: %w", ErrBadOptions, errors.Join(errs...))
	}
	return nil
}

func (o *Options) ensureDefaults() {
	if o.ShortTermLen == 0 {
		o.ShortTermLen = 10
	}
	if o.MoveLen == 0 {
		o.MoveLen = max(1, o.ShortTermLen/2)
	}
	if o.JoinAt == 0 {
		o.JoinAt = 0.3
	}
	if o.SessionGap == 0 {
		o.SessionGap = time.Hour
	}
	if o.HeatAt == 0 {
		o.HeatAt = 5
	}
	if o.Tau == 0 {
		o.Tau = 1e7 * time.Second
	}
	if o.MaxProfileItems == 0 {
		o.MaxProfileItems = 64
	}
	if o.Analyzer == nil {
		o.Analyzer = textmem.EnglishAnalyzer{}
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
}

// Turn is one recorded chat turn (MemoryOS's page): the user's message and
// the answer, if recorded.
type Turn struct {
	// ID is the turn's id, of textmem's id shape (Record assigns one when
	// empty).
	ID string `json:"id"`
	// Memory is the textmem memory holding the turn's text; "" until the
	// OS wrote it (see Pending).
	Memory    string    `json:"memory,omitempty"`
	User      string    `json:"user"`
	Assistant string    `json:"assistant,omitempty"`
	Time      time.Time `json:"time"`
	// Session is the mid-term session holding the turn; "" while it is in
	// the short-term queue.
	Session string `json:"session,omitempty"`
	// Dialog is the id of the first turn of the turn's dialog: the turns
	// of a cube recorded without a pause longer than Options.SessionGap
	// between two (a sitting, as a LoCoMo or MemoryOS dialog session is);
	// Record sets it.
	Dialog string `json:"dialog,omitempty"`
	// AssistantCube is the assistant's cube (textmem.Cube.Assistant) the
	// turn's chat read, "" none: extraction writes the procedures it finds
	// in the turn there (see Route).
	AssistantCube string `json:"assistant_cube,omitempty"`
}

// Text is the turn as one text: the user's message, then the answer on
// its own line.
func (t Turn) Text() string {
	if t.Assistant == "" {
		return t.User
	}
	if t.User == "" {
		return t.Assistant
	}
	return t.User + "\n" + t.Assistant
}

// Session is a mid-term topic session: a group of turns on one topic.
type Session struct {
	ID       string   `json:"id"`
	Summary  string   `json:"summary"`
	Keywords []string `json:"keywords"`
	// Terms are the session's most frequent terms (at most 64) with their
	// counts over its turns, for similarity.
	Terms map[string]int `json:"terms"`
	// Turns are the ids of its turns, oldest first.
	Turns []string `json:"turns"`
	// Visits counts retrievals of the session (N_visit), Interactions the
	// turns added since its last consolidation (L_interaction).
	Visits       int       `json:"visits"`
	Interactions int       `json:"interactions"`
	LastVisit    time.Time `json:"last_visit"`
	// Last is the time of its newest turn.
	Last    time.Time `json:"last"`
	Created time.Time `json:"created"`
	Updated time.Time `json:"updated"`
	// Consolidated counts its consolidations into the profile.
	Consolidated int `json:"consolidated"`
	// Heat is Heat(now) when the session was read.
	Heat float64 `json:"heat"`
}

// Heat is MemoryOS's segment heat H = α·N_visit + β·L_interaction +
// γ·R_recency with α = β = γ = 1 and R_recency = exp(-Δt/τ), Δt the time
// since the last visit (or creation).
func (s Session) heat(now time.Time, tau time.Duration) float64 {
	dt := max(now.Sub(s.LastVisit), 0)
	return float64(s.Visits) + float64(s.Interactions) + math.Exp(-dt.Seconds()/tau.Seconds())
}

// Store keeps the short-, mid- and long-term records of every cube in a
// textmem.Backend. Safe for concurrent use.
type Store struct {
	be   textmem.Backend
	opts Options
	log  *slog.Logger

	// idMu guards lastID.
	idMu   sync.Mutex
	lastID uint64
}

// Open returns a Store over be. Errors: ErrBadOptions.
func Open(be textmem.Backend, opts Options) (*Store, error) {
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	opts.ensureDefaults()
	return &Store{be: be, opts: opts, log: opts.Logger}, nil
}

// Options returns the Store's options with defaults filled in.
func (s *Store) Options() Options { return s.opts }

// Key layout, relative to the cube (see textmem.Backend):
//
//	c/t/<turn id>            Turn JSON
//	c/q/<turn id>            empty: the turn is in the short-term queue
//	c/m/<turn id>            empty: the turn was recorded or moved to a session and awaits its textmem memory or that memory's new Source (the OS's materialize)
//	c/r/<memory id>          the turn id whose text that memory holds
//	c/s/<session id>         Session JSON
//	c/p                      Profile JSON
//	c/j/<job id>             Job JSON
//	c/l/<memory id>/<seq>    Change JSON (seq: 16 hex digits of Unix ns, 8 of a counter)
//	c/x/<16 hex ns>/<id>     the memory expires then
//	c/e/<id>                 its expiry time (16 hex ns), to move or clear it
//	c/o/<response id>        ResponseRecord JSON (the response log; ids sort by time)
const (
	pTurn    = "c/t/"
	pQueue   = "c/q/"
	pPending = "c/m/"
	pMemTurn = "c/r/"
	pSession = "c/s/"
	kProfile = "c/p"
	pJob     = "c/j/"
	pLog     = "c/l/"
	pExpiry  = "c/x/"
	pExpOf   = "c/e/"
	pResp    = "c/o/"
)

// newID returns an id of textmem's shape: 16 hex digits of Unix
// nanoseconds (strictly increasing within the Store), 8 random.
func (s *Store) newID() string {
	s.idMu.Lock()
	n := uint64(s.opts.Now().UnixNano())
	if n <= s.lastID {
		n = s.lastID + 1
	}
	s.lastID = n
	s.idMu.Unlock()
	var b [12]byte
	binary.BigEndian.PutUint64(b[:8], n)
	_, _ = rand.Read(b[8:])
	return hex.EncodeToString(b[:])
}

func getJSON(txn textmem.Txn, key string, v any) error {
	b, err := txn.Get([]byte(key))
	if errors.Is(err, textmem.ErrKeyNotFound) {
		return ErrNotFound
	}
	if err != nil {
		return err
	}
	return json.Unmarshal(b, v)
}

func setJSON(txn textmem.Txn, key string, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return txn.Set([]byte(key), b)
}

// Moved reports what Record did beyond appending.
type Moved struct {
	// Turns moved from the queue into Session.
	Turns   []string `json:"turns"`
	Session string   `json:"session"`
	// Joined is true when Session existed before.
	Joined bool `json:"joined"`
}

// Record appends turns to cube's short-term queue, assigning the IDs left
// empty (turns is updated in place). When the queue then holds more than
// Options.ShortTermLen turns, its oldest max(MoveLen, overflow) turns move
// into a session in the same transaction (see package doc): nothing is
// dropped. Recorded and moved turns are marked as awaiting their textmem
// memory or its new Source (Pending, SetMemory). A turn already recorded is left as it is. Returns
// the moves made.
func (s *Store) Record(ctx context.Context, cube string, turns ...Turn) ([]Moved, error) {
	for i := range turns {
		if turns[i].ID == "" {
			turns[i].ID = s.newID()
		}
	}
	now := s.opts.Now().UTC()
	sid := s.newID()
	var moved []Moved
	err := s.be.Update(ctx, cube, func(txn textmem.Txn) error {
		moved = nil
		prev, err := s.lastTurn(txn)
		if err != nil {
			return err
		}
		for _, t := range turns {
			switch _, err := txn.Get([]byte(pTurn + t.ID)); {
			case err == nil:
				continue
			case !errors.Is(err, textmem.ErrKeyNotFound):
				return err
			}
			t.Session = ""
			if t.Time.IsZero() {
				t.Time = now
			}
			t.Dialog = t.ID
			if prev.Dialog != "" && t.Time.Sub(prev.Time) <= s.opts.SessionGap && !t.Time.Before(prev.Time) {
				t.Dialog = prev.Dialog
			}
			prev = t
			if err := setJSON(txn, pTurn+t.ID, t); err != nil {
				return err
			}
			if err := txn.Set([]byte(pQueue+t.ID), nil); err != nil {
				return err
			}
			if err := txn.Set([]byte(pPending+t.ID), nil); err != nil {
				return err
			}
		}
		queue, err := idsUnder(txn, pQueue)
		if err != nil {
			return err
		}
		if len(queue) <= s.opts.ShortTermLen {
			return nil
		}
		n := max(s.opts.MoveLen, len(queue)-s.opts.ShortTermLen)
		parts, err := s.split(txn, queue[:n])
		if err != nil {
			return err
		}
		for i, part := range parts {
			if i > 0 {
				sid = s.newID()
			}
			m, err := s.move(txn, part, sid, now)
			if err != nil {
				return err
			}
			moved = append(moved, m)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("convmem: record in cube %s: %w", cube, err)
	}
	return moved, nil
}

// lastTurn is the newest turn of the short-term queue; the zero Turn when
// it is empty.
func (s *Store) lastTurn(txn textmem.Txn) (Turn, error) {
	queue, err := idsUnder(txn, pQueue)
	if err != nil || len(queue) == 0 {
		return Turn{}, err
	}
	var t Turn
	err = getJSON(txn, pTurn+queue[len(queue)-1], &t)
	if errors.Is(err, ErrNotFound) {
		return Turn{}, nil
	}
	return t, err
}

// split cuts the turns ids (oldest first) where two follow each other
// more than Options.SessionGap apart.
func (s *Store) split(txn textmem.Txn, ids []string) ([][]Turn, error) {
	var parts [][]Turn
	var prev time.Time
	for i, id := range ids {
		var t Turn
		if err := getJSON(txn, pTurn+id, &t); err != nil {
			return nil, fmt.Errorf("turn %s: %w", id, err)
		}
		if i == 0 || t.Time.Sub(prev) > s.opts.SessionGap || prev.Sub(t.Time) > s.opts.SessionGap {
			parts = append(parts, nil)
		}
		parts[len(parts)-1] = append(parts[len(parts)-1], t)
		prev = t.Time
	}
	return parts, nil
}

// move takes group out of the queue into the most similar session whose
// newest turn is within Options.SessionGap of the group's first, or a new
// one with id sid.
func (s *Store) move(txn textmem.Txn, group []Turn, sid string, now time.Time) (Moved, error) {
	ids := make([]string, len(group))
	for i, t := range group {
		ids[i] = t.ID
	}
	terms := map[string]int{}
	for _, t := range group {
		s.opts.Analyzer.Terms(t.Text(), func(w string) { terms[w]++ })
	}
	var best Session
	bestSim := -1.0
	all, err := scan[Session](txn, pSession)
	if err != nil {
		return Moved{}, err
	}
	for _, ss := range all {
		if gap := group[0].Time.Sub(ss.Last); gap > s.opts.SessionGap || -gap > s.opts.SessionGap {
			continue
		}
		if sim := cosine(terms, ss.Terms); sim > bestSim {
			best, bestSim = ss, sim
		}
	}
	joined := bestSim >= s.opts.JoinAt && best.ID != ""
	ses := best
	var oldSummary string
	if joined {
		oldSummary = ses.Summary
	} else {
		ses = Session{ID: sid, Created: now, LastVisit: now, Terms: map[string]int{}}
	}
	for w, c := range terms {
		ses.Terms[w] += c
	}
	ses.Terms = topTerms(ses.Terms, 64)
	ses.Keywords = keywords(ses.Terms, 8)
	texts := []string{oldSummary}
	for _, t := range group {
		texts = append(texts, t.Text())
	}
	ses.Summary = s.summarize(texts, ses.Terms)
	ses.Interactions += len(group)
	ses.Updated = now
	for _, t := range group {
		if t.Time.After(ses.Last) {
			ses.Last = t.Time
		}
		ses.Turns = append(ses.Turns, t.ID)
		t.Session = ses.ID
		if err := setJSON(txn, pTurn+t.ID, t); err != nil {
			return Moved{}, err
		}
		if err := txn.Delete([]byte(pQueue + t.ID)); err != nil {
			return Moved{}, err
		}
		if err := txn.Set([]byte(pPending+t.ID), nil); err != nil {
			return Moved{}, err
		}
	}
	ses.Heat = 0
	if err := setJSON(txn, pSession+ses.ID, ses); err != nil {
		return Moved{}, err
	}
	return Moved{Turns: ids, Session: ses.ID, Joined: joined}, nil
}

// cosine is the cosine similarity of two term-count vectors.
func cosine(a, b map[string]int) float64 {
	if len(a) == 0 || len(b) == 0 {
		return 0
	}
	var dot, na, nb float64
	for w, x := range a {
		na += float64(x * x)
		if y, ok := b[w]; ok {
			dot += float64(x * y)
		}
	}
	for _, y := range b {
		nb += float64(y * y)
	}
	return dot / math.Sqrt(na*nb)
}

// topTerms keeps the n most frequent terms (ties by term).
func topTerms(m map[string]int, n int) map[string]int {
	if len(m) <= n {
		return m
	}
	out := map[string]int{}
	for _, w := range keywords(m, n) {
		out[w] = m[w]
	}
	return out
}

// keywords are the n most frequent terms, most frequent first (ties by
// term).
func keywords(m map[string]int, n int) []string {
	ws := make([]string, 0, len(m))
	for w := range m {
		ws = append(ws, w)
	}
	slices.SortFunc(ws, func(a, b string) int {
		if c := cmp.Compare(m[b], m[a]); c != 0 {
			return c
		}
		return strings.Compare(a, b)
	})
	return ws[:min(n, len(ws))]
}

// maxSummary bounds a session summary, bytes.
const maxSummary = 320

// summarize is an extractive summary: the sentences of texts that carry the
// most weight under terms (the sum of their distinct terms' counts over the
// square root of their length, as a centroid summary does), kept in their
// order, up to maxSummary bytes.
func (s *Store) summarize(texts []string, terms map[string]int) string {
	type sent struct {
		text  string
		at    int
		score float64
	}
	var sents []sent
	for _, t := range texts {
		for _, x := range Sentences(t) {
			seen := map[string]bool{}
			var sc float64
			n := 0
			s.opts.Analyzer.Terms(x, func(w string) {
				n++
				if !seen[w] {
					seen[w] = true
					sc += float64(terms[w])
				}
			})
			if n == 0 {
				continue
			}
			sents = append(sents, sent{text: x, at: len(sents), score: sc / math.Sqrt(float64(n))})
		}
	}
	byScore := slices.Clone(sents)
	slices.SortStableFunc(byScore, func(a, b sent) int { return cmp.Compare(b.score, a.score) })
	var pick []sent
	size := 0
	for _, x := range byScore {
		if slices.ContainsFunc(pick, func(p sent) bool { return p.text == x.text }) {
			continue
		}
		if size > 0 && size+len(x.text)+1 > maxSummary {
			continue
		}
		pick = append(pick, x)
		size += len(x.text) + 1
		if size >= maxSummary/2 {
			break
		}
	}
	slices.SortFunc(pick, func(a, b sent) int { return cmp.Compare(a.at, b.at) })
	parts := make([]string, len(pick))
	for i, p := range pick {
		parts[i] = p.text
	}
	out := strings.Join(parts, " ")
	if len(out) > maxSummary {
		out = truncUTF8(out, maxSummary)
	}
	return out
}

// Sentences splits text at sentence ends (. ! ? followed by a space or the
// end) and line breaks, trimming each; empty ones are left out.
func Sentences(text string) []string {
	var out []string
	start := 0
	flush := func(end int) {
		if x := strings.TrimSpace(text[start:end]); x != "" {
			out = append(out, x)
		}
		start = end
	}
	for i := 0; i < len(text); i++ {
		switch text[i] {
		case '\n':
			flush(i)
		case '.', '!', '?':
			if i+1 == len(text) || text[i+1] == ' ' || text[i+1] == '\n' {
				flush(i + 1)
			}
		}
	}
	flush(len(text))
	return out
}

func truncUTF8(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && n < len(s) && s[n]&0xC0 == 0x80 {
		n--
	}
	return s[:n]
}

// ShortTerm returns cube's short-term queue, oldest first.
func (s *Store) ShortTerm(ctx context.Context, cube string) ([]Turn, error) {
	return s.turnsUnder(ctx, cube, pQueue)
}

// Turns returns every recorded turn of cube, oldest first.
func (s *Store) Turns(ctx context.Context, cube string) ([]Turn, error) {
	var out []Turn
	err := s.be.View(ctx, cube, func(txn textmem.Txn) (err error) {
		out, err = scan[Turn](txn, pTurn)
		return err
	})
	return out, err
}

// turnsUnder reads the turns whose ids are the keys under prefix (the
// queue's or the pending marks), in key order: oldest first.
func (s *Store) turnsUnder(ctx context.Context, cube, prefix string) ([]Turn, error) {
	var out []Turn
	err := s.be.View(ctx, cube, func(txn textmem.Txn) error {
		ids, err := idsUnder(txn, prefix)
		if err != nil {
			return err
		}
		out = make([]Turn, len(ids))
		for i, id := range ids {
			if err := getJSON(txn, pTurn+id, &out[i]); err != nil {
				return fmt.Errorf("turn %s: %w", id, err)
			}
		}
		return nil
	})
	return out, err
}

// idsUnder returns what follows prefix in each key under it, in key order.
func idsUnder(txn textmem.Txn, prefix string) ([]string, error) {
	var ids []string
	err := txn.Iterate([]byte(prefix), true, func(k, _ []byte) error {
		ids = append(ids, string(k[len(prefix):]))
		return nil
	})
	return ids, err
}

// scan decodes every JSON value under prefix, in key order.
func scan[T any](txn textmem.Txn, prefix string) ([]T, error) {
	var out []T
	err := txn.Iterate([]byte(prefix), false, func(_, v []byte) error {
		var x T
		if err := json.Unmarshal(v, &x); err != nil {
			return err
		}
		out = append(out, x)
		return nil
	})
	return out, err
}

// Turn returns one recorded turn; ErrNotFound if cube has none of that id.
func (s *Store) Turn(ctx context.Context, cube, id string) (Turn, error) {
	var t Turn
	err := s.be.View(ctx, cube, func(txn textmem.Txn) error { return getJSON(txn, pTurn+id, &t) })
	return t, err
}

// SessionsOf maps each of ids that is a recorded turn in a session, or the
// textmem memory of one, to that session's id.
func (s *Store) SessionsOf(ctx context.Context, cube string, ids []string) (map[string]string, error) {
	out := map[string]string{}
	err := s.be.View(ctx, cube, func(txn textmem.Txn) error {
		clear(out)
		for _, id := range ids {
			tid := id
			switch b, err := txn.Get([]byte(pMemTurn + id)); {
			case err == nil:
				tid = string(b)
			case !errors.Is(err, textmem.ErrKeyNotFound):
				return err
			}
			var t Turn
			switch err := getJSON(txn, pTurn+tid, &t); {
			case errors.Is(err, ErrNotFound):
				continue
			case err != nil:
				return err
			}
			if t.Session != "" {
				out[id] = t.Session
			}
		}
		return nil
	})
	return out, err
}

// Sessions returns cube's sessions, oldest first, with their heat now.
func (s *Store) Sessions(ctx context.Context, cube string) ([]Session, error) {
	now := s.opts.Now()
	var out []Session
	err := s.be.View(ctx, cube, func(txn textmem.Txn) (err error) {
		out, err = scan[Session](txn, pSession)
		return err
	})
	for i := range out {
		out[i].Heat = out[i].heat(now, s.opts.Tau)
	}
	return out, err
}

// Session returns one session with its heat now; ErrNotFound if none.
func (s *Store) Session(ctx context.Context, cube, id string) (Session, error) {
	var ss Session
	err := s.be.View(ctx, cube, func(txn textmem.Txn) error { return getJSON(txn, pSession+id, &ss) })
	ss.Heat = ss.heat(s.opts.Now(), s.opts.Tau)
	return ss, err
}

// SessionHit is a session found by SearchSessions.
type SessionHit struct {
	Session Session `json:"session"`
	Score   float64 `json:"score"`
}

// SearchSessions ranks cube's sessions for query by the cosine of its
// terms and each session's term counts weighted by idf over the sessions
// (ln(1 + N/df)); the top k with a score above 0, best first.
func (s *Store) SearchSessions(ctx context.Context, cube, query string, k int) ([]SessionHit, error) {
	ses, err := s.Sessions(ctx, cube)
	if err != nil || len(ses) == 0 || k <= 0 {
		return nil, err
	}
	q := map[string]int{}
	s.opts.Analyzer.Terms(query, func(w string) { q[w]++ })
	df := map[string]int{}
	for _, x := range ses {
		for w := range x.Terms {
			if q[w] > 0 {
				df[w]++
			}
		}
	}
	n := float64(len(ses))
	var hits []SessionHit
	for _, x := range ses {
		var dot, nq, nd float64
		for w, c := range q {
			idf := math.Log1p(n / float64(max(df[w], 1)))
			wq := float64(c) * idf
			nq += wq * wq
			if d := x.Terms[w]; d > 0 {
				dot += wq * float64(d) * idf
			}
		}
		for _, d := range x.Terms {
			nd += float64(d * d)
		}
		if dot > 0 {
			hits = append(hits, SessionHit{Session: x, Score: dot / math.Sqrt(nq*nd)})
		}
	}
	slices.SortStableFunc(hits, func(a, b SessionHit) int { return cmp.Compare(b.Score, a.Score) })
	return hits[:min(k, len(hits))], nil
}

// Visit counts one retrieval of each of sessions (N_visit), now.
func (s *Store) Visit(ctx context.Context, cube string, sessions []string) error {
	now := s.opts.Now().UTC()
	return s.be.Update(ctx, cube, func(txn textmem.Txn) error {
		for _, id := range sessions {
			var ss Session
			switch err := getJSON(txn, pSession+id, &ss); {
			case errors.Is(err, ErrNotFound):
				continue
			case err != nil:
				return err
			}
			ss.Visits++
			ss.LastVisit = now
			if err := setJSON(txn, pSession+id, ss); err != nil {
				return err
			}
		}
		return nil
	})
}

// Due returns cube's sessions whose heat is at least Options.HeatAt and
// that gained turns since their last consolidation, hottest first.
func (s *Store) Due(ctx context.Context, cube string) ([]Session, error) {
	ses, err := s.Sessions(ctx, cube)
	if err != nil {
		return nil, err
	}
	var out []Session
	for _, x := range ses {
		if x.Heat >= s.opts.HeatAt && x.Interactions > 0 {
			out = append(out, x)
		}
	}
	slices.SortStableFunc(out, func(a, b Session) int { return cmp.Compare(b.Heat, a.Heat) })
	return out, nil
}

// Consolidated records that session id went into the long-term profile:
// its interactions start again from 0 (MemoryOS resets L_interaction after
// its analysis), so its heat falls until it is used again.
func (s *Store) Consolidated(ctx context.Context, cube, id string) error {
	return s.be.Update(ctx, cube, func(txn textmem.Txn) error {
		var ss Session
		if err := getJSON(txn, pSession+id, &ss); err != nil {
			return err
		}
		ss.Interactions = 0
		ss.Consolidated++
		return setJSON(txn, pSession+id, ss)
	})
}

// DropTurn forgets turn id, or the turn whose text memory id holds (the
// memory was deleted): out of the queue, out of its session. Not an error
// if it was not recorded.
func (s *Store) DropTurn(ctx context.Context, cube, id string) error {
	return s.be.Update(ctx, cube, func(txn textmem.Txn) error {
		switch b, err := txn.Get([]byte(pMemTurn + id)); {
		case err == nil:
			if err := txn.Delete([]byte(pMemTurn + id)); err != nil {
				return err
			}
			id = string(b)
		case !errors.Is(err, textmem.ErrKeyNotFound):
			return err
		}
		var t Turn
		switch err := getJSON(txn, pTurn+id, &t); {
		case errors.Is(err, ErrNotFound):
			return nil
		case err != nil:
			return err
		}
		if t.Session != "" {
			var ss Session
			switch err := getJSON(txn, pSession+t.Session, &ss); {
			case err == nil:
				ss.Turns = slices.DeleteFunc(ss.Turns, func(x string) bool { return x == id })
				if err := setJSON(txn, pSession+ss.ID, ss); err != nil {
					return err
				}
			case !errors.Is(err, ErrNotFound):
				return err
			}
		}
		if err := txn.Delete([]byte(pQueue + id)); err != nil {
			return err
		}
		if err := txn.Delete([]byte(pPending + id)); err != nil {
			return err
		}
		return txn.Delete([]byte(pTurn + id))
	})
}

// Pending returns cube's turns that were recorded or moved to a session
// since their textmem memory was last written (none yet, or its Source
// still the short-term one), oldest first.
func (s *Store) Pending(ctx context.Context, cube string) ([]Turn, error) {
	return s.turnsUnder(ctx, cube, pPending)
}

// PendingCubes returns the cubes with turns awaiting their memory (after a
// crash between a record or move and the memories' writes).
func (s *Store) PendingCubes(ctx context.Context) ([]string, error) {
	return s.be.Cubes(ctx, []byte(pPending))
}

// SetMemory records that textmem memory mem holds the text of turn seen
// (as Pending or Turn returned it) and clears its pending mark, unless
// the turn moved into a session after seen was read (its Session
// differs): the memory written for seen then has a stale Source, so the
// turn stays pending for the next pass. ErrNotFound if the turn is gone.
func (s *Store) SetMemory(ctx context.Context, cube string, seen Turn, mem string) error {
	return s.be.Update(ctx, cube, func(txn textmem.Txn) error {
		var t Turn
		if err := getJSON(txn, pTurn+seen.ID, &t); err != nil {
			return err
		}
		t.Memory = mem
		if err := setJSON(txn, pTurn+seen.ID, t); err != nil {
			return err
		}
		if err := txn.Set([]byte(pMemTurn+mem), []byte(seen.ID)); err != nil {
			return err
		}
		if t.Session != seen.Session {
			return nil
		}
		return txn.Delete([]byte(pPending + seen.ID))
	})
}
