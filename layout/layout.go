package layout

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/memosrt/memosrt/errkind"
	"github.com/memosrt/memosrt/runtime"
	"github.com/memosrt/memosrt/runtime/llama"
	"github.com/memosrt/memosrt/textmem"
)

// DefaultPreamble opens every pack.
const DefaultPreamble = "You are a helpful assistant. What you remember about the user:"

// retrievedHeader opens the block of retrieved memories put before the last
// user turn.
const retrievedHeader = "Also relevant:\n"

// preferencesHeader opens the block of the user's preferences put before a
// user turn, ahead of the retrieved memories.
const preferencesHeader = "User preferences:\n"

// KindPreference is the Kind of the memories that state a preference of
// the user (convmem.TypePreference: extraction stores its preference type
// so); retrieval gives them their own block (Options.PreferenceK).
const KindPreference = "preference"

// bytesPerToken estimates tokens from bytes where no tokenizer is loaded
// (the text-only upstream backend): about 4 bytes a token for English BPE
// vocabularies (OpenAI's tokenizer guide gives ~4 characters per token).
const bytesPerToken = 4

// Options configure a Layout. Zero means the default given.
type Options struct {
	// Preamble is the system text before the memories. Default DefaultPreamble.
	Preamble string
	// MaxPackTokens bounds a cube's pack, in tokens (preamble included).
	// Default n_ctx/2 with an engine, 8192 without one (counted as
	// bytes/4).
	MaxPackTokens int
	// RetrieveK is how many memories outside the pack retrieval may add
	// before a user turn. Default 5.
	RetrieveK int
	// MaxRetrievedTokens bounds the retrieved memories of one prompt (all
	// turns' blocks together), tokens: a memory that would pass it is left
	// out. Default n_ctx/4 with an engine, 4096 without one.
	MaxRetrievedTokens int
	// PreferenceK is how many preference memories (KindPreference) outside
	// the pack retrieval may add before a user turn, in their own "User
	// preferences:" block ahead of the other retrieved memories, searched
	// among the preferences alone; the other retrieved memories are then
	// never preferences. Preferences are the user's: with several cubes
	// the block takes them from the cube written to (Input.Cube) alone,
	// and a read cube's preference memories are retrieved as any memory.
	// Default 3; negative: no such block (preferences are retrieved as any
	// memory).
	PreferenceK int
	// MaxPreferenceTokens bounds the preference blocks of one prompt, tokens,
	// apart from MaxRetrievedTokens. Default n_ctx/16 with an engine, 1024
	// without one.
	MaxPreferenceTokens int
	// HideSources are Sources whose memories retrieval never adds to a
	// prompt (the OS's short-term chat turns: the conversation carries
	// them, and retrieving them would change every next prompt's prefix).
	HideSources []string
	// LastKinds are Kinds retrieval ranks after every other memory
	// (textmem.Query.LastKinds; the OS's recorded chat turns: context, not
	// facts, so a fact that matches comes first).
	LastKinds []string
	// ChatTemplate overrides the model's template ("" uses the model's; a
	// model without one gets the plain layout described at Assemble).
	ChatTemplate string
}

// Layout is the one prompt layout of memosrt: it renders a cube's pack
// (preamble and pack members), the memories retrieval adds, and the
// conversation, and tokenizes them so that the pack's tokens are a prefix
// of every prompt of the cube. Tier jobs compute stored packs with Pack;
// requests assemble prompts with Assemble; both give the same pack tokens.
// Safe for concurrent use.
type Layout struct {
	eng  *runtime.Engine // nil: text only (no tokens)
	mem  *textmem.Store
	opts Options
	tmpl string
}

// NewLayout returns the layout over a text store and, for tokens, an
// engine (nil renders text only, for a backend without a tokenizer).
func New(eng *runtime.Engine, mem *textmem.Store, opts Options) *Layout {
	if opts.Preamble == "" {
		opts.Preamble = DefaultPreamble
	}
	if opts.MaxPackTokens == 0 {
		opts.MaxPackTokens = 8192
		if eng != nil {
			opts.MaxPackTokens = eng.NCtx() / 2
		}
	}
	if opts.RetrieveK == 0 {
		opts.RetrieveK = 5
	}
	if opts.MaxRetrievedTokens == 0 {
		opts.MaxRetrievedTokens = 4096
		if eng != nil {
			opts.MaxRetrievedTokens = eng.NCtx() / 4
		}
	}
	if opts.PreferenceK == 0 {
		opts.PreferenceK = 3
	}
	if opts.MaxPreferenceTokens == 0 {
		opts.MaxPreferenceTokens = 1024
		if eng != nil {
			opts.MaxPreferenceTokens = eng.NCtx() / 16
		}
	}
	l := &Layout{eng: eng, mem: mem, opts: opts, tmpl: opts.ChatTemplate}
	if l.tmpl == "" && eng != nil {
		l.tmpl = eng.Model().ChatTemplate()
	}
	return l
}

// Options returns the effective options.
func (l *Layout) Options() Options { return l.opts }

// Template returns the chat template in use, "" for the plain layout.
func (l *Layout) Template() string { return l.tmpl }

// Message is one chat turn in wire-neutral form.
type Message struct {
	Role    string // "system", "user", "assistant", "tool"
	Content string
}

// CheckRole refuses a message role other than system, user, assistant
// or tool with a *errkind.FieldError naming field.
func CheckRole(field, role string) error {
	switch role {
	case "system", "user", "assistant", "tool":
		return nil
	}
	return &errkind.FieldError{Field: field, Msg: fmt.Sprintf("unknown role %q (want system, user, assistant or tool)", role)}
}

// Input is what a prompt is assembled from.
type Input struct {
	// Cube whose memories the prompt carries; "" for none (no pack, no
	// retrieval: plain inference).
	Cube string
	// Members are the pack's candidate memories in pack order (the cube's
	// activation tier, Tiers.HotSet); they enter while they fit
	// MaxPackTokens.
	Members []textmem.Memory
	// Messages is the conversation; retrieval searches with the last user
	// turn. Empty for a pack alone (Pack).
	Messages []Message
	// NoRetrieve skips retrieval (the pack alone is added).
	NoRetrieve bool
	// Shared are the cubes the prompt reads besides Cube (a request naming
	// several cubes), in the order named; ignored without Cube. Their
	// packs come first in the system turn, in this order, then Cube's, so
	// that prompts naming the same shared cubes share a token prefix
	// (Prompt.SharedTokens); retrieval searches them all.
	Shared []SharedCube
}

// SharedCube is a cube a prompt reads besides its own (Input.Shared): its
// name and its pack's candidate members in pack order (Tiers.HotSet).
type SharedCube struct {
	Cube    string
	Members []textmem.Memory
}

// Prompt is an assembled prompt. With an engine, Tokens = PackTokens
// followed by the tokens of Rest.
type Prompt struct {
	Head       string           // the pack part (system turn), "" without a cube
	Rest       string           // the rest of the prompt text
	PackTokens []int32          // tokens of Head (BOS included): the cube's pack
	Tokens     []int32          // the whole prompt
	System     string           // the pack's system text (preamble and members), "" without a cube
	Messages   []Message        // the conversation with the retrieved block before the last user turn
	Pack       []textmem.Memory // memories inside the pack, pack order (the shared cubes' first)
	// SharedTokens is how many leading Tokens hold the preamble and the
	// shared cubes' pack members (Input.Shared), BOS included: a prefix
	// every prompt naming the same shared cubes (with the same members)
	// starts with, whatever its own cube. 0 without shared cubes.
	SharedTokens int
	// SharedPack is how many leading Pack members come from the shared
	// cubes.
	SharedPack int
	Retrieved  []textmem.Memory // memories retrieval added for the last user turn (earlier turns keep theirs)
	// Preferences are the preference memories retrieval added for the last
	// user turn in their own block (Options.PreferenceK), not in Retrieved.
	Preferences []textmem.Memory
	// RetrievedSpans gives, per Retrieved memory, where its bullet line's
	// tokens sit in Tokens: [Start, End), equal to LineTokens of that
	// memory (nil without an engine, or when the template changed the
	// line's text).
	RetrievedSpans []Span

	lines []string // bullet lines of every turn's retrieved block, prompt order
}

// Span is a half-open token range [Start, End) of Prompt.Tokens.
type Span struct{ Start, End int }

// LineTokens returns the tokens a retrieved memory's bullet line has in
// every prompt (no BOS): each line of a retrieved block is tokenized on its
// own (tokenizeRest), so these are exactly the tokens of the span
// Prompt.RetrievedSpans gives for m. Errors: the tokenizer's.
func (l *Layout) LineTokens(m textmem.Memory) ([]int32, error) {
	if l.eng == nil {
		return nil, fmt.Errorf("layout: no tokenizer (text-only backend)")
	}
	return l.tokenizeAfterBreak(bullet(m))
}

// tokenizeAfterBreak tokenizes text as it reads after a line break: the
// tokens of "\n"+text less those of "\n" alone when they start with them
// (a SentencePiece vocabulary would put a space before text tokenized on
// its own), else text's own. Retrieved lines always follow a line break.
func (l *Layout) tokenizeAfterBreak(text string) ([]int32, error) {
	nl, err := l.eng.Tokenize("\n", false)
	if err != nil {
		return nil, err
	}
	t, err := l.eng.Tokenize("\n"+text, false)
	if err != nil {
		return nil, err
	}
	if len(t) > len(nl) && slices.Equal(t[:len(nl)], nl) {
		return t[len(nl):], nil
	}
	return l.eng.Tokenize(text, false)
}

func bullet(m textmem.Memory) string {
	return "- " + strings.ReplaceAll(strings.TrimSpace(m.Text), "\n", " ") + "\n"
}

// count returns the tokens of text as the pack budget counts them: BOS
// excluded with addBOS false. Without an engine: bytes / bytesPerToken.
func (l *Layout) count(text string, addBOS bool) (int, error) {
	if l.eng == nil {
		return (len(text) + bytesPerToken - 1) / bytesPerToken, nil
	}
	t, err := l.eng.Tokenize(text, addBOS)
	return len(t), err
}

// packMembers returns the members that fit MaxPackTokens, in order: the
// preamble's tokens first, then each member's line, until one does not fit.
func (l *Layout) packMembers(members []textmem.Memory) ([]textmem.Memory, error) {
	budget := l.opts.MaxPackTokens
	if n, err := l.count(l.opts.Preamble, true); err == nil {
		budget -= n
	}
	var out []textmem.Memory
	for _, m := range members {
		n, err := l.count(bullet(m), false)
		if err != nil {
			return nil, err
		}
		if n > budget {
			break
		}
		budget -= n
		out = append(out, m)
	}
	return out, nil
}

// systemText renders the pack: preamble, then one line per memory.
func (l *Layout) systemText(mems []textmem.Memory) string {
	var b strings.Builder
	b.WriteString(l.opts.Preamble)
	b.WriteString("\n")
	for _, m := range mems {
		b.WriteString(bullet(m))
	}
	return b.String()
}

// RetrievedText is the block put before the last user turn for memories
// retrieval found outside the pack ("" for none).
func RetrievedText(mems []textmem.Memory) string { return block(retrievedHeader, mems) }

// PreferencesText is the block put before a user turn, ahead of the
// retrieved memories, for the preference memories retrieval found outside
// the pack ("" for none).
func PreferencesText(mems []textmem.Memory) string { return block(preferencesHeader, mems) }

// block is header and a bullet line a memory ("" for no memories).
func block(header string, mems []textmem.Memory) string {
	if len(mems) == 0 {
		return ""
	}
	var b strings.Builder
	b.WriteString(header)
	for _, m := range mems {
		b.WriteString(bullet(m))
	}
	return b.String()
}

// preferences returns up to PreferenceK preference memories of the first
// of cubes, the one written to (KindPreference) matching query (the default query, dense fusion
// included, without neighbour expansion), best first, that are not yet shown and
// fit what is left of *budget (tokens), marking them shown and taking
// their tokens from *budget. The hot preferences are in the pack already
// (it holds the cube's hottest memories); this slot adds the relevant ones
// outside it.
func (l *Layout) preferences(ctx context.Context, cubes []string, query string, shown map[string]bool, budget *int) ([]textmem.Memory, error) {
	if l.opts.PreferenceK <= 0 {
		return nil, nil
	}
	q := textmem.DefaultQuery(query, l.opts.PreferenceK+len(shown))
	q.Kinds, q.NotSources, q.Neighbors = []string{KindPreference}, l.opts.HideSources, 0
	// preferences are the user's: searched in the cube written to alone
	// (the first); a read cube's preference memories are retrieved as any
	// other memory
	hits, err := l.search(ctx, cubes[:1], q, false)
	if err != nil {
		return nil, err
	}
	var out []textmem.Memory
	for _, h := range hits {
		if shown[h.Memory.ID] || len(out) == l.opts.PreferenceK {
			continue
		}
		n, err := l.count(bullet(h.Memory), false)
		if err != nil {
			return nil, err
		}
		if n > *budget {
			continue
		}
		*budget -= n
		out = append(out, h.Memory)
		shown[h.Memory.ID] = true
	}
	return out, nil
}

// Query returns the text retrieval searches with: the last user turn.
func Query(msgs []Message) string {
	for i := len(msgs) - 1; i >= 0; i-- {
		if msgs[i].Role == "user" {
			return msgs[i].Content
		}
	}
	return ""
}

// retrieve prefixes every user turn of msgs with the memories retrieval
// finds for it outside the pack (RetrievedText), each memory shown once, at
// the first turn that finds it. Earlier turns get the block they got when
// they were the last turn, so a conversation's next prompt extends the
// tokens of the previous one (as long as the text tier is unchanged) and
// its KV state is reused. Preference memories matching a turn come first,
// in their own block (preferences). It returns the new messages, the
// memories retrieved for the last user turn (the ones this turn adds): the
// other memories and the preferences, and the bullet lines of every turn's
// retrieved block (not the preferences') in order.
func (l *Layout) retrieve(ctx context.Context, cubes []string, pack []textmem.Memory, msgs []Message) ([]Message, []textmem.Memory, []textmem.Memory, []string, error) {
	out := append([]Message(nil), msgs...)
	shown := make(map[string]bool, len(pack))
	for _, m := range pack {
		shown[m.ID] = true
	}
	last := -1
	for i, m := range out {
		if m.Role == "user" {
			last = i
		}
	}
	var latest, latestPrefs []textmem.Memory
	var lines []string
	budget, prefBudget := l.opts.MaxRetrievedTokens, l.opts.MaxPreferenceTokens
	for i, m := range out {
		if m.Role != "user" || strings.TrimSpace(m.Content) == "" {
			continue
		}
		prefs, err := l.preferences(ctx, cubes, m.Content, shown, &prefBudget)
		if err != nil {
			return nil, nil, nil, nil, err
		}
		q := textmem.DefaultQuery(m.Content, l.opts.RetrieveK+len(shown))
		q.NotSources, q.LastKinds = l.opts.HideSources, l.opts.LastKinds
		if l.opts.PreferenceK > 0 {
			q.NotKinds = []string{KindPreference} // their own block
		}
		hits, err := l.search(ctx, cubes, q, true)
		if err != nil {
			return nil, nil, nil, nil, err
		}
		var found []textmem.Memory
		for _, h := range hits {
			if shown[h.Memory.ID] || len(found) == l.opts.RetrieveK {
				continue
			}
			n, err := l.count(bullet(h.Memory), false)
			if err != nil {
				return nil, nil, nil, nil, err
			}
			if n > budget {
				continue
			}
			budget -= n
			found = append(found, h.Memory)
			shown[h.Memory.ID] = true
		}
		out[i].Content = PreferencesText(prefs) + RetrievedText(found) + m.Content
		for _, f := range found {
			lines = append(lines, bullet(f))
		}
		if i == last {
			latest, latestPrefs = found, prefs
		}
	}
	return out, latest, latestPrefs, lines, nil
}

// CubeCounts counts the prompt's memories (Pack, Retrieved, Preferences) by the cube
// each lives in (textmem.Memory.Cube); nil for none.
func (p Prompt) CubeCounts() map[string]int {
	var out map[string]int
	for _, m := range slices.Concat(p.Pack, p.Retrieved, p.Preferences) {
		if out == nil {
			out = map[string]int{}
		}
		out[m.Cube]++
	}
	return out
}

// cubes returns the cubes a prompt reads: Cube, then the shared ones.
func (in Input) cubes() []string {
	out := []string{in.Cube}
	for _, s := range in.Shared {
		out = append(out, s.Cube)
	}
	return out
}

// packOf returns the pack members of in that fit MaxPackTokens: the shared
// cubes' first, in the order named, then Cube's (one budget for all), and
// how many of them are the shared cubes'. A memory in two cubes' candidates
// enters once.
func (l *Layout) packOf(in Input) ([]textmem.Memory, int, error) {
	if len(in.Shared) == 0 {
		pack, err := l.packMembers(in.Members)
		return pack, 0, err
	}
	var all []textmem.Memory
	seen := map[string]bool{}
	add := func(ms []textmem.Memory) {
		for _, m := range ms {
			if !seen[m.ID] {
				seen[m.ID] = true
				all = append(all, m)
			}
		}
	}
	for _, s := range in.Shared {
		add(s.Members)
	}
	nShared := len(all)
	add(in.Members)
	pack, err := l.packMembers(all)
	return pack, min(nShared, len(pack)), err
}

// search runs q in each of cubes and merges the hits: each memory once (its
// first cube's hit), ordered as one search orders them (Query.LastKinds
// last, then by Score, higher first; equal scores keep the cubes' order).
// BM25 scores of different cubes are comparable in scale (the same k1, b
// and query terms; each cube's own document statistics). With ownKinds,
// q.NotKinds leaves out memories of the first cube alone (the user's own
// preferences, which have their own block); the read cubes' memories of
// those kinds are found as any other.
func (l *Layout) search(ctx context.Context, cubes []string, q textmem.Query, ownKinds bool) ([]textmem.Hit, error) {
	if len(cubes) == 1 {
		return l.mem.SearchWith(ctx, cubes[0], q)
	}
	var all []textmem.Hit
	seen := map[string]bool{}
	for i, c := range cubes {
		cq := q
		if ownKinds && i > 0 {
			cq.NotKinds = nil
		}
		hits, err := l.mem.SearchWith(ctx, c, cq)
		if err != nil {
			return nil, err
		}
		for _, h := range hits {
			if !seen[h.Memory.ID] {
				seen[h.Memory.ID] = true
				all = append(all, h)
			}
		}
	}
	last := func(h textmem.Hit) int {
		if slices.Contains(q.LastKinds, h.Memory.Kind) {
			return 1
		}
		return 0
	}
	slices.SortStableFunc(all, func(a, b textmem.Hit) int {
		if d := last(a) - last(b); d != 0 {
			return d
		}
		return cmp.Compare(b.Score, a.Score)
	})
	return all, nil
}

// headTokens tokenizes p.Head, BOS first. With shared cubes (sharedText,
// the system text of the preamble and their members, is a part of Head)
// the head is tokenized in two pieces, up to the end of sharedText and the
// rest, so that the first piece's tokens (SharedTokens) are the same
// whatever follows; else, or when the template does not keep the system
// text as is, in one.
func (l *Layout) headTokens(p *Prompt, sharedText string) ([]int32, error) {
	i := -1
	if sharedText != "" {
		i = strings.Index(p.Head, p.System)
	}
	if i < 0 {
		return l.eng.Tokenize(p.Head, true)
	}
	cut := i + len(sharedText)
	st, err := l.eng.Tokenize(p.Head[:cut], true)
	if err != nil {
		return nil, err
	}
	rt, err := l.eng.Tokenize(p.Head[cut:], false)
	if err != nil {
		return nil, err
	}
	p.SharedTokens = len(st)
	return append(st, rt...), nil
}

// Pack assembles the pack of cube with the given members alone: Tokens ==
// PackTokens. Tier jobs store its KV state; Assemble's prompts of the cube
// start with the same tokens.
func (l *Layout) Pack(ctx context.Context, cube string, members []textmem.Memory) (Prompt, error) {
	return l.Assemble(ctx, Input{Cube: cube, Members: members, NoRetrieve: true})
}

// Assemble renders and tokenizes a prompt:
//
//   - with a cube, a system turn holding the pack (Preamble, then "- text"
//     per pack member) comes first; retrieval adds up to RetrieveK other
//     memories of the cube matching each user turn, as an "Also relevant:"
//     block before that turn, preceded by a "User preferences:" block of
//     up to PreferenceK matching preference memories (each memory once, at
//     the first turn that finds it: see retrieve);
//   - the turns are rendered with the chat template (the system turn alone,
//     rendered without the assistant opener, must be a prefix of the whole
//     rendering; else the prompt has no separate pack part), or without
//     one as the pack text followed by one line per turn ("\n" + content;
//     an assistant turn continues the line before it, as the model wrote
//     it, so that the next turn's prompt extends the tokens the sequence
//     held after this one).
//
// Head and Rest are tokenized separately (Head with BOS), so PackTokens is
// a prefix of Tokens whatever follows. Without an engine no tokens are
// produced and MaxPackTokens counts bytes/4. Errors: the text store's
// search errors, llama.ErrTemplate for a template that cannot render the
// turns, tokenizer errors.
func (l *Layout) Assemble(ctx context.Context, in Input) (Prompt, error) {
	var p Prompt
	msgs := in.Messages
	sharedText := ""
	if in.Cube != "" {
		pack, nShared, err := l.packOf(in)
		if err != nil {
			return p, err
		}
		p.Pack, p.SharedPack = pack, nShared
		if !in.NoRetrieve && l.opts.RetrieveK > 0 {
			var err error
			if msgs, p.Retrieved, p.Preferences, p.lines, err = l.retrieve(ctx, in.cubes(), pack, msgs); err != nil {
				return p, err
			}
		}
		p.System = l.systemText(pack)
		if len(in.Shared) > 0 {
			sharedText = l.systemText(pack[:nShared])
		}
	} else {
		msgs = append([]Message(nil), msgs...)
	}
	p.Messages = msgs
	if l.tmpl != "" && l.eng != nil {
		var all []llama.ChatMessage
		if in.Cube != "" {
			all = append(all, llama.ChatMessage{Role: "system", Content: p.System})
		}
		for _, m := range msgs {
			all = append(all, llama.ChatMessage{Role: m.Role, Content: m.Content})
		}
		model := l.eng.Model()
		if in.Cube != "" {
			head, err := model.ApplyChatTemplate(l.tmpl, all[:1], false)
			if err != nil {
				return p, err
			}
			if len(msgs) == 0 {
				p.Head = head
			} else {
				full, err := model.ApplyChatTemplate(l.tmpl, all, true)
				if err != nil {
					return p, err
				}
				if strings.HasPrefix(full, head) {
					p.Head, p.Rest = head, full[len(head):]
				} else {
					p.Rest = full // the template rewrites the system turn: no pack part
				}
			}
		} else if len(all) > 0 {
			full, err := model.ApplyChatTemplate(l.tmpl, all, true)
			if err != nil {
				return p, err
			}
			p.Rest = full
		}
	} else {
		var sb strings.Builder
		for i, m := range msgs {
			if (i > 0 || in.Cube != "") && m.Role != "assistant" {
				sb.WriteString("\n")
			}
			sb.WriteString(m.Content)
		}
		p.Head, p.Rest = p.System, sb.String()
	}
	if l.eng == nil {
		return p, nil
	}
	if p.Head != "" {
		ht, err := l.headTokens(&p, sharedText)
		if err != nil {
			return p, err
		}
		rt, err := l.tokenizeRest(&p, false, len(ht))
		if err != nil {
			return p, err
		}
		p.PackTokens = ht
		p.Tokens = append(append(make([]int32, 0, len(ht)+len(rt)), ht...), rt...)
		return p, nil
	}
	t, err := l.tokenizeRest(&p, true, 0)
	if err != nil {
		return p, err
	}
	p.Tokens = t
	return p, nil
}

// tokenizeRest tokenizes p.Rest (BOS first with addBOS) in pieces: each
// bullet line of a retrieved block (p.lines) on its own, without BOS, and
// the text between them as one piece each, a piece after a line break as
// it reads there (tokenizeAfterBreak); the tokens are the pieces'
// concatenation and the text is unchanged. So a retrieved memory's tokens
// in the prompt are LineTokens of it, whatever surrounds it: what a KV
// chunk of the memory needs (docs/design.md, Composition). It sets
// p.RetrievedSpans (offset: the tokens before Rest in Tokens) for the
// last turn's memories, the last lines. A line the template rendered
// otherwise is not found: the whole text is then one piece, no spans.
func (l *Layout) tokenizeRest(p *Prompt, addBOS bool, offset int) ([]int32, error) {
	rest := p.Rest
	var pieces []string // text, line, text, line, ..., text
	at := 0
	for _, ln := range p.lines {
		i := strings.Index(rest[at:], ln)
		if i < 0 {
			pieces = nil
			break
		}
		pieces = append(pieces, rest[at:at+i], ln)
		at += i + len(ln)
	}
	if pieces == nil {
		return l.eng.Tokenize(rest, addBOS)
	}
	pieces = append(pieces, rest[at:])
	var toks []int32
	var spans []Span // of every line, in rest's tokens
	last := ""       // the last piece tokenized
	for k, piece := range pieces {
		if piece == "" && !(k == 0 && addBOS) {
			continue
		}
		var t []int32
		var err error
		if k > 0 && strings.HasSuffix(last, "\n") {
			t, err = l.tokenizeAfterBreak(piece) // every line ends so
		} else {
			t, err = l.eng.Tokenize(piece, addBOS && k == 0)
		}
		if err != nil {
			return nil, err
		}
		if k%2 == 1 {
			spans = append(spans, Span{Start: offset + len(toks), End: offset + len(toks) + len(t)})
		}
		toks = append(toks, t...)
		last = piece
	}
	if len(spans) != len(p.lines) {
		return l.eng.Tokenize(rest, addBOS) // an empty line: cannot be
	}
	p.RetrievedSpans = spans[len(spans)-len(p.Retrieved):]
	return toks, nil
}
