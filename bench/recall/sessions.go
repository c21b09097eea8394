package recall

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"sync"
	"time"

	"github.com/memosrt/memosrt"
	"github.com/memosrt/memosrt/convmem"
	"github.com/memosrt/memosrt/runtime"
	"github.com/memosrt/memosrt/textmem"
)

// Conversation is what ModeSessions fed of one LoCoMo conversation and
// where its turns ended up. A turn is placed when its memory id is in
// exactly one of the cube's short-term queue and its sessions, once.
type Conversation struct {
	Cube string `json:"cube"`
	// Turns is the number of turns fed (one chat request each).
	Turns int `json:"turns"`
	// ShortTerm is the short-term queue's length at the end, MaxShortTerm
	// the longest it was after any turn; both at most ShortTermLen.
	ShortTerm    int `json:"short_term"`
	MaxShortTerm int `json:"max_short_term"`
	ShortTermLen int `json:"short_term_len"`
	// Sessions counts the cube's sessions, InSessions the turn ids they
	// hold (a turn held twice counts twice).
	Sessions   int `json:"sessions"`
	InSessions int `json:"in_sessions"`
	// Unrecorded counts chats after which no new turn was at the queue's
	// end; Missing fed turns in neither place; Duplicated fed turns held
	// more than once (in the queue, a session or both); Unknown ids held
	// that no chat of this run recorded.
	Unrecorded int `json:"unrecorded"`
	Missing    int `json:"missing"`
	Duplicated int `json:"duplicated"`
	Unknown    int `json:"unknown"`
	// Elapsed is the wall time of feeding the turns and asking the
	// questions, Feed of feeding alone.
	Elapsed time.Duration `json:"elapsed_ns"`
	Feed    time.Duration `json:"feed_ns"`
}

// Misplaced counts the turns not placed exactly once, and ids held that
// were not fed: Unrecorded + Missing + Duplicated + Unknown.
func (c Conversation) Misplaced() int { return c.Unrecorded + c.Missing + c.Duplicated + c.Unknown }

// OK reports whether the queue stayed within its bound and every fed turn
// is placed exactly once, the counts adding up to Turns.
func (c Conversation) OK() bool {
	return c.MaxShortTerm <= c.ShortTermLen && c.ShortTerm <= c.ShortTermLen && c.Misplaced() == 0 &&
		c.ShortTerm+c.InSessions == c.Turns
}

// clock is the OS's clock in ModeSessions: set before each turn, read by
// the OS's goroutines too. Safe for concurrent use.
type clock struct {
	mu sync.Mutex // guards t
	t  time.Time
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *clock) set(t time.Time) {
	c.mu.Lock()
	c.t = t
	c.mu.Unlock()
}

// measureSessions runs ModeSessions over all samples: one OS per
// conversation, every turn fed in order as a chat request (the text cfg
// indexes for it, as ModeFlat stores it), then every question asked with
// OS.Search. opts has its defaults filled in.
func measureSessions(ctx context.Context, samples []sample, cfg config, ks []int, opts Options) (*results, []Conversation, error) {
	res := newResults()
	var convs []Conversation
	for _, s := range samples {
		c, err := sessionsSample(ctx, s, cfg, ks, opts, res)
		if err != nil {
			return nil, nil, err
		}
		convs = append(convs, c)
		opts.Logger.Info("conversation done", "cube", c.Cube, "turns", c.Turns, "short_term", c.ShortTerm,
			"sessions", c.Sessions, "misplaced", c.Misplaced(), "feed_ms", c.Feed.Milliseconds(), "elapsed_ms", c.Elapsed.Milliseconds())
	}
	return res, convs, nil
}

// sessionsSample feeds s into an OS of its own and scores its questions
// into res.
func sessionsSample(ctx context.Context, s sample, cfg config, ks []int, opts Options, res *results) (c Conversation, err error) {
	start := time.Now()
	cube := cubeName(s.ID)
	c = Conversation{Cube: cube, ShortTermLen: opts.ShortTermLen}
	dir, err := os.MkdirTemp("", "memosrt-recall-os-*")
	if err != nil {
		return c, fmt.Errorf("recall: %w", err)
	}
	defer os.RemoveAll(dir)
	clk := &clock{}
	o, err := openSessionsOS(ctx, dir, opts, clk)
	if err != nil {
		return c, err
	}
	defer func() {
		if cerr := o.Close(context.WithoutCancel(ctx)); cerr != nil && err == nil {
			err = cerr
		}
	}()
	fed, dia, err := feed(ctx, o, clk, s, cfg, &c)
	if err != nil {
		return c, err
	}
	c.Feed = time.Since(start)
	if err := place(ctx, o, cube, fed, &c); err != nil {
		return c, err
	}
	if err := askSessions(ctx, o, cube, s, dia, ks, cfg.query, res); err != nil {
		return c, err
	}
	c.Elapsed = time.Since(start)
	return c, nil
}

// openSessionsOS opens ModeSessions' OS in dir: opts.Model loaded, no
// background scheduler, no extraction jobs, no conversation packs, clk its
// clock.
func openSessionsOS(ctx context.Context, dir string, opts Options, clk *clock) (*memosrt.OS, error) {
	return memosrt.Open(ctx, memosrt.Options{
		Dir: dir, NoSync: true, Model: opts.Model,
		Engine:      runtime.Options{NCtx: opts.NCtx, Threads: opts.Threads},
		Parallel:    1,
		NoScheduler: true, NoExtract: true, NoPersist: true,
		Embedder:      opts.Embedder,
		Conversations: convmem.Options{ShortTermLen: opts.ShortTermLen},
		Clock:         clk,
		Logger:        opts.Logger,
	})
}

// turnTimes are the event times of s's turns, [session][turn]: the
// session's date plus the turn's index in seconds (a session without a
// date, or not after the previous one's turns, an hour after them), so
// every turn's is its own and they ascend.
func turnTimes(s sample) [][]time.Time {
	out := make([][]time.Time, len(s.Sessions))
	var last time.Time
	for j, ses := range s.Sessions {
		date := ses.Date
		if date.IsZero() || !date.After(last) {
			date = last.Add(time.Hour)
		}
		for i := range ses.Turns {
			last = date.Add(time.Duration(i) * time.Second)
			out[j] = append(out[j], last)
		}
	}
	return out
}

// feed sends every turn of s, in order, as a chat request in cube
// cubeName(s.ID) (created here), the clock at the turn's time, and checks
// after each that the turn is recorded at the end of the short-term queue.
// It returns the recorded turn ids and the dialog that maps a hit, by its
// EventTime (eventKey), to its dia_id: turn ids and the ids of the
// memories that hold their text need not be the same.
func feed(ctx context.Context, o *memosrt.OS, clk *clock, s sample, cfg config, c *Conversation) (map[string]bool, dialog, error) {
	cube := cubeName(s.ID)
	dia := dialog{byID: map[string]string{}, known: map[string]bool{}}
	fed := map[string]bool{}
	if _, err := o.CreateCube(ctx, memosrt.Cube{Name: cube}); err != nil {
		return nil, dia, err
	}
	times := turnTimes(s)
	for j, ses := range s.Sessions {
		for i, t := range ses.Turns {
			at := times[j][i]
			clk.set(at)
			text := cfg.turnText(ses, t)
			if _, err := o.Chat(ctx, memosrt.Request{Cube: cube, Messages: []memosrt.Message{{Role: "user", Content: text}},
				NumPredict: 1, Record: memosrt.RecordUser, NoUsage: true}); err != nil {
				return nil, dia, fmt.Errorf("recall: %s %s: chat: %w", s.ID, t.DiaID, err)
			}
			c.Turns++
			dia.known[t.DiaID] = true
			st, err := o.ShortTerm(ctx, cube)
			if err != nil {
				return nil, dia, err
			}
			c.MaxShortTerm = max(c.MaxShortTerm, len(st))
			n := len(st)
			if n == 0 || st[n-1].User != text || st[n-1].ID == "" || fed[st[n-1].ID] {
				c.Unrecorded++ // nothing new at the queue's end
				continue
			}
			fed[st[n-1].ID] = true
			dia.byID[eventKey(at)] = t.DiaID
		}
	}
	return fed, dia, nil
}

// place counts where the turns of cube are: each fed turn id should be
// once in the short-term queue or a session, and no other id there.
func place(ctx context.Context, o *memosrt.OS, cube string, fed map[string]bool, c *Conversation) error {
	held := map[string]int{}
	st, err := o.ShortTerm(ctx, cube)
	if err != nil {
		return err
	}
	c.ShortTerm = len(st)
	for _, t := range st {
		held[t.ID]++
	}
	sess, err := o.Sessions(ctx, cube)
	if err != nil {
		return err
	}
	c.Sessions = len(sess)
	for _, x := range sess {
		c.InSessions += len(x.Turns)
		for _, id := range x.Turns {
			held[id]++
		}
	}
	for id := range fed {
		switch n := held[id]; {
		case n == 0:
			c.Missing++
		case n > 1:
			c.Duplicated++
		}
	}
	for id := range held {
		if !fed[id] {
			c.Unknown++
		}
	}
	return nil
}

// askSessions scores every question of s into res with OS.Search (q
// with the question and k), one search per cut-off k, as a caller asking
// for k hits gets them: the sessions' rerank draws on a candidate pool
// that grows with k, so the first k hits of a larger search differ.
func askSessions(ctx context.Context, o *memosrt.OS, cube string, s sample, dia dialog, ks []int, q textmem.Query, res *results) error {
	err := res.score(s, dia, ks, func(question string) (func(k int) ([]string, error), error) {
		return func(k int) ([]string, error) {
			q.Text, q.K = question, k
			hits, err := o.Search(ctx, cube, q)
			if err != nil {
				return nil, err
			}
			keys := make([]string, len(hits))
			for i, h := range hits {
				keys[i] = eventKey(h.Memory.EventTime)
			}
			return keys, nil
		}, nil
	})
	if err != nil {
		return fmt.Errorf("recall: %s: search: %w", s.ID, err)
	}
	return nil
}

// eventKey identifies a fed turn by its event time.
func eventKey(t time.Time) string { return strconv.FormatInt(t.UnixNano(), 10) }
