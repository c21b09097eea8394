package convmem

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"unicode"

	"github.com/memosrt/memosrt/runtime/grammar"
	"github.com/memosrt/memosrt/textmem"
)

// Memory types an extraction assigns (MemOS's MemReader types).
const (
	TypeFact       = "fact"
	TypeEvent      = "event"
	TypePreference = "preference"
	TypeOpinion    = "opinion"
	TypeProcedure  = "procedure"
)

// Types are the memory types of an extraction, in schema order.
var Types = []string{TypeFact, TypeEvent, TypePreference, TypeOpinion, TypeProcedure}

// Extraction bounds, held by the schema so that any model's output ends:
// every string and array is bounded, so a grammar-constrained generation
// finishes within about MaxExtractTokens tokens.
const (
	MaxExtracted   = 5   // memories per job
	MaxMemoryChars = 160 // characters of one memory's text
	MaxTags        = 4
	MaxTagChars    = 24
	// MaxExtractTokens is the generation budget of an extraction: the
	// longest output the schema allows, at one token per character.
	MaxExtractTokens = 1536
)

// ExtractSchema is the JSON schema of an extraction's output.
var ExtractSchema = fmt.Sprintf(`{"type":"object","properties":{"memories":{"type":"array","maxItems":%d,"items":{"type":"object","properties":{`+
	`"text":{"type":"string","minLength":1,"maxLength":%d},`+
	`"type":{"enum":["fact","event","preference","opinion","procedure"]},`+
	`"tags":{"type":"array","maxItems":%d,"items":{"type":"string","minLength":1,"maxLength":%d}},`+
	`"confidence":{"enum":[0.1,0.2,0.3,0.4,0.5,0.6,0.7,0.8,0.9,1.0]}},`+
	`"required":["text","type","tags","confidence"],"additionalProperties":false}}},"required":["memories"],"additionalProperties":false}`,
	MaxExtracted, MaxMemoryChars, MaxTags, MaxTagChars)

// ExtractGrammar is ExtractSchema as GBNF (runtime/grammar).
func ExtractGrammar() (string, error) { return grammar.FromSchema([]byte(ExtractSchema)) }

// Extracted is one memory extracted from turns.
type Extracted struct {
	Text       string   `json:"text"`
	Type       string   `json:"type"`
	Tags       []string `json:"tags"`
	Confidence float64  `json:"confidence"`
}

// Dropped is an extracted memory not stored, and why.
type Dropped struct {
	Text string `json:"text"`
	Why  string `json:"why"`
}

// ErrMalformed is returned by ParseExtraction for output that does not
// satisfy ExtractSchema.
var ErrMalformed = errors.New("convmem: extraction output does not satisfy the schema")

// ExtractPrompt is the completion prompt of an extraction over turns.
func ExtractPrompt(turns []Turn) string {
	var b strings.Builder
	b.WriteString("Extract the lasting memories about the user from this conversation: facts, events, preferences, opinions and procedures, each one short sentence in the user's words, with its type, up to 4 tags and a confidence from 0.1 to 1.0. Answer with JSON only.\n\nConversation:\n")
	for _, t := range turns {
		b.WriteString("User: ")
		b.WriteString(t.User)
		b.WriteByte('\n')
		if t.Assistant != "" {
			b.WriteString("Assistant: ")
			b.WriteString(t.Assistant)
			b.WriteByte('\n')
		}
	}
	b.WriteString("\nJSON: ")
	return b.String()
}

// ParseExtraction checks out against ExtractSchema (strictly: unknown
// fields, a wrong type, a string over its bound or trailing data are
// ErrMalformed) and returns the memories that are grounded in sources —
// at least a third of a memory's terms, and one at least, appear in the
// source turns' texts under a — and those dropped, with why: ungrounded,
// blank, or a repeat within the output.
func ParseExtraction(out string, sources []string, a textmem.Analyzer) ([]Extracted, []Dropped, error) {
	var doc struct {
		Memories *[]struct {
			Text       *string   `json:"text"`
			Type       *string   `json:"type"`
			Tags       *[]string `json:"tags"`
			Confidence *float64  `json:"confidence"`
		} `json:"memories"`
	}
	d := json.NewDecoder(strings.NewReader(out))
	d.DisallowUnknownFields()
	if err := d.Decode(&doc); err != nil {
		return nil, nil, fmt.Errorf("%w: %v", ErrMalformed, err)
	}
	if _, err := d.Token(); !errors.Is(err, io.EOF) {
		return nil, nil, fmt.Errorf("%w: data after the object", ErrMalformed)
	}
	if doc.Memories == nil {
		return nil, nil, fmt.Errorf("%w: no memories", ErrMalformed)
	}
	if len(*doc.Memories) > MaxExtracted {
		return nil, nil, fmt.Errorf("%w: %d memories, at most %d", ErrMalformed, len(*doc.Memories), MaxExtracted)
	}
	src := map[string]bool{}
	for _, s := range sources {
		a.Terms(s, func(w string) { src[w] = true })
	}
	var keep []Extracted
	var drop []Dropped
	for i, m := range *doc.Memories {
		switch {
		case m.Text == nil || m.Type == nil || m.Tags == nil || m.Confidence == nil:
			return nil, nil, fmt.Errorf("%w: memories[%d] lacks a required field", ErrMalformed, i)
		case !slices.Contains(Types, *m.Type):
			return nil, nil, fmt.Errorf("%w: memories[%d].type %q", ErrMalformed, i, *m.Type)
		case *m.Confidence < 0 || *m.Confidence > 1:
			return nil, nil, fmt.Errorf("%w: memories[%d].confidence %v", ErrMalformed, i, *m.Confidence)
		case len([]rune(*m.Text)) > MaxMemoryChars || len(*m.Tags) > MaxTags:
			return nil, nil, fmt.Errorf("%w: memories[%d] over its bounds", ErrMalformed, i)
		}
		for _, t := range *m.Tags {
			if t == "" || len([]rune(t)) > MaxTagChars {
				return nil, nil, fmt.Errorf("%w: memories[%d] has a tag out of bounds", ErrMalformed, i)
			}
		}
		e := Extracted{Text: strings.TrimSpace(*m.Text), Type: *m.Type, Tags: *m.Tags, Confidence: *m.Confidence}
		if e.Tags == nil {
			e.Tags = []string{}
		}
		n, hit := 0, 0
		a.Terms(e.Text, func(w string) {
			n++
			if src[w] {
				hit++
			}
		})
		switch {
		case n == 0:
			drop = append(drop, Dropped{Text: e.Text, Why: "no words"})
		case hit == 0 || 3*hit < n:
			drop = append(drop, Dropped{Text: e.Text, Why: fmt.Sprintf("not grounded in the turns: %d of %d terms found there", hit, n)})
		case slices.ContainsFunc(keep, func(k Extracted) bool { return strings.EqualFold(k.Text, e.Text) }):
			drop = append(drop, Dropped{Text: e.Text, Why: "repeated in the output"})
		default:
			keep = append(keep, e)
		}
	}
	return keep, drop, nil
}

// Extractive extracts memories without a model: each sentence of the
// users' messages that speaks of the user in the first person ("I", "my",
// "me", ...), typed by its cue words (Classify), confidence 0.5, tagged
// with its two most frequent terms; at most MaxExtracted, in order.
func Extractive(turns []Turn, a textmem.Analyzer) []Extracted {
	var out []Extracted
	for _, t := range turns {
		for _, s := range Sentences(t.User) {
			if len(out) == MaxExtracted {
				return out
			}
			if !firstPerson(s) || strings.HasSuffix(s, "?") {
				continue
			}
			text := truncUTF8(s, MaxMemoryChars)
			if slices.ContainsFunc(out, func(e Extracted) bool { return strings.EqualFold(e.Text, text) }) {
				continue
			}
			tf := map[string]int{}
			a.Terms(text, func(w string) { tf[w]++ })
			if len(tf) == 0 {
				continue
			}
			tags := keywords(tf, 2)
			for i, g := range tags {
				tags[i] = truncUTF8(g, MaxTagChars)
			}
			out = append(out, Extracted{Text: text, Type: Classify(text), Tags: tags, Confidence: 0.5})
		}
	}
	return out
}

func firstPerson(s string) bool {
	for _, w := range words(s) {
		switch w {
		case "i", "i'm", "im", "i've", "i'd", "i'll", "my", "me", "mine", "myself", "we", "our", "us":
			return true
		}
	}
	return false
}

// Classify types a first-person sentence by cue words: a preference (love,
// like, prefer, favorite, hate, ...), an opinion (think, believe, feel),
// a procedure (how to, first, then, step), an event (a past-tense cue:
// went, visited, yesterday, last ...), else a fact.
func Classify(s string) string {
	ws := words(s)
	has := func(set ...string) bool {
		return slices.ContainsFunc(ws, func(w string) bool { return slices.Contains(set, w) })
	}
	switch {
	case polarityOf(ws) != 0:
		return TypePreference
	case has("think", "believe", "feel", "opinion", "guess", "reckon"):
		return TypeOpinion
	case has("step", "steps", "first", "then", "recipe", "instructions") && has("then", "step", "steps", "recipe"):
		return TypeProcedure
	case has("went", "visited", "yesterday", "last", "ago", "was", "were", "did", "met", "moved", "started", "finished"):
		return TypeEvent
	}
	return TypeFact
}

// words splits s into lower-case words, apostrophes kept inside.
func words(s string) []string {
	f := strings.FieldsFunc(strings.ToLower(s), func(r rune) bool {
		return !unicode.IsLetter(r) && !unicode.IsDigit(r) && r != '\'' && r != '’'
	})
	for i, w := range f {
		f[i] = strings.Trim(strings.ReplaceAll(w, "’", "'"), "'")
	}
	return f
}

var (
	positive = []string{"love", "loves", "loved", "like", "likes", "liked", "enjoy", "enjoys", "enjoyed", "adore", "adores",
		"prefer", "prefers", "favorite", "favourite", "fond"}
	negative = []string{"hate", "hates", "hated", "dislike", "dislikes", "disliked", "detest", "detests", "loathe", "loathes", "despise"}
	negators = []string{"not", "no", "never", "don't", "dont", "doesn't", "doesnt", "didn't", "didnt", "isn't", "aren't",
		"wasn't", "won't", "can't", "cannot"}
	// pronouns are left out of a statement's subject when comparing two
	pronouns = []string{"i", "i'm", "im", "me", "my", "we", "our", "us", "you", "he", "she", "they", "it"}
)

// polarityOf is +1 for a liking, -1 for a disliking, 0 when ws state
// neither: the sign of its first sentiment verb, flipped by each negator.
func polarityOf(ws []string) int {
	p := 0
	for _, w := range ws {
		switch {
		case p == 0 && slices.Contains(positive, w):
			p = 1
		case p == 0 && slices.Contains(negative, w):
			p = -1
		}
	}
	if p == 0 {
		return 0
	}
	for _, w := range ws {
		if slices.Contains(negators, w) {
			p = -p
		}
	}
	return p
}

// Sentiment is +1 when s states a liking, -1 a disliking, 0 neither (see
// Contradicts): a cheap test before looking for a contradicted memory.
func Sentiment(s string) int { return polarityOf(words(s)) }

// Contradicts reports whether statement b contradicts a: both state a
// liking or disliking (polarityOf) of opposite sign about the same thing —
// the same terms under an analyzer once sentiment words, negators and
// pronouns are left out, at least one of them. "I love Chinese food" and
// "I hate Chinese food" contradict; "I love Chinese food" and "I hate
// Italian food" do not. Facts of other shapes ("my dog is Max", then "my
// dog is Rex") need a model to judge and are not detected here.
func Contradicts(a, b string, an textmem.Analyzer) bool {
	wa, wb := words(a), words(b)
	pa, pb := polarityOf(wa), polarityOf(wb)
	if pa == 0 || pb == 0 || pa == pb {
		return false
	}
	ta, tb := subject(wa, an), subject(wb, an)
	return len(ta) > 0 && slices.Equal(ta, tb)
}

// subject is the sorted set of terms of ws without sentiment words,
// negators and pronouns.
func subject(ws []string, an textmem.Analyzer) []string {
	var keep bytes.Buffer
	for i, w := range ws {
		if slices.Contains(positive, w) || slices.Contains(negative, w) || slices.Contains(negators, w) || slices.Contains(pronouns, w) {
			continue
		}
		if w == "longer" && i > 0 && ws[i-1] == "no" { // "no longer" is one negation
			continue
		}
		keep.WriteString(w)
		keep.WriteByte(' ')
	}
	set := map[string]bool{}
	an.Terms(keep.String(), func(w string) { set[w] = true })
	out := make([]string, 0, len(set))
	for w := range set {
		out = append(out, w)
	}
	slices.Sort(out)
	return out
}

// Route returns the cube an extracted memory of type typ is written to:
// assistant (the assistant's cube the turns' chat read, "" none) for a
// procedure (what the assistant learned about its task: how to do it),
// the user's cube for everything else (facts, events, preferences and
// opinions about the user), as MemoryOS splits long_term_assistant from
// long_term_user.
func Route(typ, user, assistant string) string {
	if typ == TypeProcedure && assistant != "" {
		return assistant
	}
	return user
}

// AssistantCube returns the assistant's cube of a job's turns: the latest
// turn's that names one, "" none.
func AssistantCube(turns []Turn) string {
	for i := len(turns) - 1; i >= 0; i-- {
		if turns[i].AssistantCube != "" {
			return turns[i].AssistantCube
		}
	}
	return ""
}
