package server

import (
	"context"
	"strings"

	"github.com/memosrt/memosrt/scheduler"
	"github.com/memosrt/memosrt/textmem"
)

// bullet renders one memory line exactly as scheduler does, so that the
// system turn rendered here tokenizes to the scheduler's pack tokens and a
// pack warmed by `memosrt kv warm` or POST .../pack is a prefix of chat
// prompts of the cube.
func bullet(m textmem.Memory) string {
	return "- " + strings.ReplaceAll(strings.TrimSpace(m.Text), "\n", " ") + "\n"
}

// packText is scheduler's system text: preamble, then one line per memory.
func packText(mems []textmem.Memory) string {
	var b strings.Builder
	b.WriteString(scheduler.DefaultPreamble)
	b.WriteString("\n")
	for _, m := range mems {
		b.WriteString(bullet(m))
	}
	return b.String()
}

// retrievedText is the block put before the last user message for memories
// retrieval found outside the pack.
func retrievedText(mems []textmem.Memory) string {
	if len(mems) == 0 {
		return ""
	}
	var b strings.Builder
	b.WriteString("Also relevant:\n")
	for _, m := range mems {
		b.WriteString(bullet(m))
	}
	return b.String()
}

// conversation returns the request's turns: the chat messages, or for a
// completion an optional system turn and one user turn.
func (r *genRequest) conversation() []message {
	if r.Messages != nil {
		return r.Messages
	}
	var out []message
	if r.System != "" {
		out = append(out, message{Role: "system", Content: r.System})
	}
	return append(out, message{Role: "user", Content: r.Prompt})
}

// query is the text retrieval searches with: the last user turn.
func (r *genRequest) query() string {
	msgs := r.conversation()
	for i := len(msgs) - 1; i >= 0; i-- {
		if msgs[i].Role == "user" {
			return msgs[i].Content
		}
	}
	return ""
}

// withRetrieved prefixes the last user turn with the retrieved block.
func withRetrieved(msgs []message, block string) []message {
	if block == "" {
		return msgs
	}
	out := append([]message(nil), msgs...)
	for i := len(out) - 1; i >= 0; i-- {
		if out[i].Role == "user" {
			out[i].Content = block + out[i].Content
			return out
		}
	}
	return append(out, message{Role: "user", Content: block})
}

// textMemories renders a cube's memories as prompt text for the
// text-only backend: the pack layout (preamble and one line per memory, in
// canonical order) while it fits maxBytes, then up to k retrieved memories
// that did not fit.
func textMemories(ctx context.Context, store *textmem.Store, cube, query string, maxBytes, k int) (string, int, error) {
	all, err := store.List(ctx, cube)
	if err != nil {
		return "", 0, err
	}
	in := map[string]bool{}
	var pack []textmem.Memory
	size := len(scheduler.DefaultPreamble) + 1
	for _, m := range all {
		n := len(bullet(m))
		if size+n > maxBytes {
			break
		}
		size += n
		pack = append(pack, m)
		in[m.ID] = true
	}
	text := packText(pack)
	n := len(pack)
	if query != "" && len(pack) < len(all) {
		hits, err := store.Search(ctx, cube, query, k+len(pack))
		if err != nil {
			return "", 0, err
		}
		var extra []textmem.Memory
		for _, h := range hits {
			if !in[h.Memory.ID] && len(extra) < k {
				extra = append(extra, h.Memory)
			}
		}
		text += retrievedText(extra)
		n += len(extra)
	}
	return text, n, nil
}
