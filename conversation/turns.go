package conversation

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/memosrt/memosrt/convmem"
	"github.com/memosrt/memosrt/errkind"
	"github.com/memosrt/memosrt/layout"
	"github.com/memosrt/memosrt/textmem"
)

// RecordTurns appends turns to cube's short-term queue (a zero Time is
// now) and has their textmem memories written in the background
// (Kind KindTurn, searchable, retrieved into prompts once the overflow
// moved them into a session; see Materialize); unless Options.NoExtract,
// sessions the move made due get a consolidation job. Returns the turns
// with their ids. Errors: storage errors (the turns are then not
// recorded, or recorded without their job).
func (m *Manager) RecordTurns(ctx context.Context, cube string, turns []convmem.Turn) ([]convmem.Turn, error) {
	now := m.now().UTC()
	for i := range turns {
		if turns[i].Time.IsZero() {
			turns[i].Time = now
		}
	}
	moved, err := m.store.Record(ctx, cube, turns...)
	if err != nil {
		return nil, err
	}
	m.materializeLater(cube)
	if m.noExtract {
		return turns, nil
	}
	for _, mv := range moved {
		s, err := m.store.Session(ctx, cube, mv.Session)
		if err != nil || s.Heat < m.store.Options().HeatAt || s.Interactions == 0 {
			continue
		}
		key := jobRef{cube, s.ID}
		m.jobMu.Lock()
		dup := m.queued[key]
		m.queued[key] = true
		m.jobMu.Unlock()
		if dup {
			continue
		}
		ids := s.Turns[max(0, len(s.Turns)-s.Interactions):]
		j := m.store.NewJob(cube, ids, s.ID)
		if err := m.store.PutJob(ctx, j); err != nil {
			return turns, err
		}
		m.enqueue(jobRef{cube, j.ID})
	}
	return turns, nil
}

// Materialize brings the textmem memories of cube's pending turns
// (convmem.Store.Pending) up to date: a turn without one gets a memory of
// Kind KindTurn (EventTime the turn's time), Source SourceShortTerm while
// it is in the short-term queue (searchable by Search, hidden from
// prompts: the facade's layout hides that Source) or "dialog:<id>" once
// it moved; a moved turn whose memory still has the short-term Source gets
// its dialog as Source. The dialog (convmem.Turn.Dialog: the turns without
// a pause longer than SessionGap, a sitting) keeps textmem's neighbour
// expansion and context smoothing within what was said together, as a
// LoCoMo dialog session does for the flat store; topic sessions cut a
// sitting wherever its topic drifts, and as Source they cost LoCoMo dev
// recall@10 (75.85 against the flat 76.00, `make recall-sessions` at
// 806723d). The memory's id is the turn's, so running it again after a
// crash between a record or move and the link writes nothing twice. Reads
// that must see every turn call it first. Errors: storage errors.
func (m *Manager) Materialize(ctx context.Context, cube string) error {
	m.turnMu.Lock()
	defer m.turnMu.Unlock()
	pend, err := m.store.Pending(ctx, cube)
	if err != nil {
		return err
	}
	limit := textmem.DefaultOptions().MaxTextBytes
	for _, t := range pend {
		src := SourceShortTerm
		if t.Session != "" {
			src = "dialog:" + t.Dialog
		}
		id := t.Memory
		if id == "" {
			text := t.Text()
			if len(text) > limit {
				text = strings.ToValidUTF8(text[:limit], "")
			}
			// the turn's id is its memory's (Import: no duplicate check or
			// near-duplicate merge, which would let a turn overwrite
			// another memory's text); a repair after a crash between this
			// write and the link finds it stored
			_, err := m.mem.Import(ctx, cube, textmem.Memory{ID: t.ID, Text: text, Kind: KindTurn, Source: src, EventTime: t.Time})
			if err != nil && !errors.Is(err, textmem.ErrIDExists) {
				return err
			}
			id = t.ID
		} else if src != SourceShortTerm {
			switch mem, err := m.mem.Get(ctx, cube, id); {
			case errors.Is(err, textmem.ErrNotFound):
			case err != nil:
				return err
			case mem.Source == SourceShortTerm:
				if _, err := m.mem.Patch(ctx, cube, id, textmem.Patch{Source: &src}); err != nil && !errors.Is(err, textmem.ErrNotFound) {
					return err
				}
			}
		}
		if err := m.store.SetMemory(ctx, cube, t, id); err != nil && !errors.Is(err, convmem.ErrNotFound) {
			return err
		}
	}
	return nil
}

// materializeLater writes cube's pending turn memories (Materialize) in
// the background (Hooks.Go), off the chat request's path: the memory
// write costs about as much as the rest of recording (`make bench-conv`).
// At most one write per cube waits at a time; one asked for while another
// runs runs after it. A write cut short by Close or a crash is done at the
// next Open (the turns stay pending).
func (m *Manager) materializeLater(cube string) {
	m.dueMu.Lock()
	due := m.due[cube]
	m.due[cube] = true
	m.dueMu.Unlock()
	if due {
		return
	}
	m.background(func() {
		m.dueMu.Lock()
		delete(m.due, cube)
		m.dueMu.Unlock()
		if err := m.Materialize(m.base, cube); err != nil {
			m.log.Warn("turn memories not written (written at the next read or start)", "cube", cube, "err", err)
		}
	})
}

// RecordChat records a chat request's turn in cube: the last of msgs if
// it is a user message with text, with answer unless userOnly (as
// RecordTurns), and assistantCube, the assistant's cube the chat read
// ("" none; convmem.Turn.AssistantCube). Nothing otherwise. Errors as
// RecordTurns.
func (m *Manager) RecordChat(ctx context.Context, cube string, msgs []layout.Message, answer string, userOnly bool, assistantCube string) error {
	if len(msgs) == 0 {
		return nil
	}
	last := msgs[len(msgs)-1]
	if last.Role != "user" || strings.TrimSpace(last.Content) == "" {
		return nil
	}
	t := convmem.Turn{User: last.Content, AssistantCube: assistantCube}
	if !userOnly {
		t.Assistant = answer
	}
	_, err := m.RecordTurns(ctx, cube, []convmem.Turn{t})
	return err
}

// MaxMessages bounds the messages TurnsOf takes.
const MaxMessages = 1000

// TurnsOf pairs msgs into turns: each user message with the assistant
// message after it; system and tool messages, and messages without text,
// are left out. Errors: *errkind.FieldError for no messages, more than
// MaxMessages, a bad role (layout.CheckRole) or no user or assistant
// message with text.
func TurnsOf(msgs []layout.Message) ([]convmem.Turn, error) {
	switch {
	case len(msgs) == 0:
		return nil, &errkind.FieldError{Field: "messages", Msg: "at least one message is required"}
	case len(msgs) > MaxMessages:
		return nil, &errkind.FieldError{Field: "messages", Msg: fmt.Sprintf("%d messages, at most %d in one call", len(msgs), MaxMessages)}
	}
	var turns []convmem.Turn
	for i, m := range msgs {
		if err := layout.CheckRole(fmt.Sprintf("messages[%d].role", i), m.Role); err != nil {
			return nil, err
		}
		if strings.TrimSpace(m.Content) == "" {
			continue
		}
		switch m.Role {
		case "user":
			turns = append(turns, convmem.Turn{User: m.Content})
		case "assistant":
			if n := len(turns); n > 0 && turns[n-1].Assistant == "" {
				turns[n-1].Assistant = m.Content
			} else {
				turns = append(turns, convmem.Turn{Assistant: m.Content})
			}
		}
	}
	if len(turns) == 0 {
		return nil, &errkind.FieldError{Field: "messages", Msg: "no user or assistant message has text"}
	}
	return turns, nil
}
