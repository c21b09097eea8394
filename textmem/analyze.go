package textmem

import (
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/kljensen/snowball/english"
)

// An Analyzer turns a text into index terms. Search runs the same Analyzer
// over the query, so a term only matches what the Analyzer produced at write
// time.
//
// Implementations must be deterministic and safe for concurrent use. Terms
// must be non-empty and must not contain the byte 0x00. The Name is stored
// with each cube's index; opening a cube whose index was built by another
// Analyzer name rebuilds that cube's postings from the stored texts.
type Analyzer interface {
	// Name identifies the analyzer and its version, e.g. "english-v1".
	Name() string
	// Terms calls emit once per term occurrence of text, in text order.
	Terms(text string, emit func(term string))
}

// EnglishAnalyzer is the default Analyzer ("english-v1"):
//
//   - Unicode letter and digit runs are words; every other rune separates
//     words (so "LGBTQ+" gives "lgbtq", "don't" gives "don" and "t").
//   - Words are lower-cased, English stop words (the Snowball list,
//     github.com/kljensen/snowball/english.IsStopWord) and one-letter words
//     are dropped, and the rest are stemmed with the Snowball English
//     (Porter2) stemmer.
//   - Runs of Chinese, Japanese and Korean characters (Han, Hiragana,
//     Katakana, Hangul), which are written without spaces, give overlapping
//     character bigrams ("记忆体" gives "记忆", "忆体"); a run of one
//     character gives that character.
type EnglishAnalyzer struct{}

// Name implements Analyzer.
func (EnglishAnalyzer) Name() string { return "english-v1" }

// Terms implements Analyzer.
func (EnglishAnalyzer) Terms(text string, emit func(string)) {
	splitWords(text, func(w string, cjk bool) {
		if cjk {
			emitBigrams(w, emit)
			return
		}
		if utf8.RuneCountInString(w) < 2 && !isDigits(w) {
			return
		}
		if english.IsStopWord(w) {
			return
		}
		if isASCII(w) {
			w = english.Stem(w, false)
		}
		emit(w)
	})
}

// PlainAnalyzer ("plain-v1") lower-cases Unicode letter and digit runs and
// nothing else: no stop words, no stemming; CJK runs give bigrams as in
// EnglishAnalyzer. It is the baseline of the recall benchmark.
type PlainAnalyzer struct{}

// Name implements Analyzer.
func (PlainAnalyzer) Name() string { return "plain-v1" }

// Terms implements Analyzer.
func (PlainAnalyzer) Terms(text string, emit func(string)) {
	splitWords(text, func(w string, cjk bool) {
		if cjk {
			emitBigrams(w, emit)
			return
		}
		emit(w)
	})
}

// splitWords calls fn with each lower-cased letter/digit run of text; CJK
// runs are reported separately with cjk set.
func splitWords(text string, fn func(w string, cjk bool)) {
	var b strings.Builder
	inCJK := false
	flush := func() {
		if b.Len() > 0 {
			fn(b.String(), inCJK)
			b.Reset()
		}
	}
	for _, r := range text {
		switch {
		case isCJK(r):
			if !inCJK {
				flush()
				inCJK = true
			}
			b.WriteRune(r)
		case unicode.IsLetter(r) || unicode.IsDigit(r) || unicode.Is(unicode.Mn, r):
			if inCJK {
				flush()
				inCJK = false
			}
			b.WriteRune(unicode.ToLower(r))
		default:
			flush()
			inCJK = false
		}
	}
	flush()
}

func emitBigrams(run string, emit func(string)) {
	if utf8.RuneCountInString(run) == 1 {
		emit(run)
		return
	}
	i := 0
	_, n1 := utf8.DecodeRuneInString(run)
	for i+n1 < len(run) {
		_, n2 := utf8.DecodeRuneInString(run[i+n1:])
		emit(run[i : i+n1+n2])
		i += n1
		n1 = n2
	}
}

func isCJK(r rune) bool {
	return unicode.In(r, unicode.Han, unicode.Hiragana, unicode.Katakana, unicode.Hangul)
}

func isASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] >= utf8.RuneSelf {
			return false
		}
	}
	return true
}

func isDigits(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return s != ""
}

// termFreqs runs a over text and returns each distinct term with its count
// and the total number of terms (the document length for BM25).
func termFreqs(a Analyzer, text string) (map[string]int, int) {
	tf := make(map[string]int)
	n := 0
	a.Terms(text, func(t string) {
		tf[t]++
		n++
	})
	return tf, n
}
