package convmem

import (
	"strings"
	"unicode"

	"github.com/memosrt/memosrt/textmem"
)

// correctionLeads are the leading words a correction may start with and
// that are not part of the corrected statement ("no, my dog is Rex").
var correctionLeads = []string{"no", "nope", "actually", "wrong", "incorrect", "not quite", "not really",
	"that's wrong", "that is wrong", "that's not right", "that is not right", "correction"}

// CorrectionText is the statement of correction s: s trimmed, with any
// leading "no", "actually", "wrong", "that's wrong", ... (followed by a
// comma, colon, dash, full stop, "!" or a space) stripped, repeatedly: "No,
// actually: my dog is Rex." gives "my dog is Rex.". "" when nothing is left.
func CorrectionText(s string) string {
	s = strings.TrimSpace(s)
	for {
		cut := false
		low := strings.ToLower(strings.ReplaceAll(s, "’", "'"))
		for _, lead := range correctionLeads {
			if !strings.HasPrefix(low, lead) {
				continue
			}
			rest := s[len(lead):]
			if rest == "" {
				return ""
			}
			if r := rune(rest[0]); !strings.ContainsRune(",:;-.! ", r) && !unicode.IsSpace(r) {
				continue // "nobody", "actually" within a word
			}
			s, cut = strings.TrimLeft(rest, ",:;-.! \t\n"), true
			break
		}
		if !cut {
			return s
		}
	}
}

// Correction matches, how MatchCorrection found its memory.
const (
	MatchLiking  = "liking"  // the opposite liking of the same thing (Contradicts)
	MatchSubject = "subject" // the longest leading subject in common, the rest different
	MatchOverlap = "overlap" // the best overlap of terms, at least OverlapAt
)

// OverlapAt is the least share of the smaller term set two statements
// have in common for MatchCorrection's last rule.
const OverlapAt = 0.5

// MatchCorrection finds among texts (the memories an answer used, best
// first) the one correction contradicts, deterministically, by three rules
// in order; the first that finds one decides:
//
//  1. liking: a text of the opposite liking of the same thing
//     (Contradicts: "I love tea" and "I hate tea");
//  2. subject: the text sharing the longest run of leading words with
//     correction (case and punctuation ignored), at least two words and
//     not all of either ("my dog is" Max and "my dog is" Rex);
//  3. overlap: the text whose terms under an (stop words dropped, stems)
//     overlap most with correction's, at least OverlapAt of the smaller
//     set.
//
// A text equal to correction (the same words) is never a match: it is
// already true. Ties go to the earlier text. It returns the index in texts
// and the rule (Match*), or -1 and "" when none matches.
func MatchCorrection(correction string, texts []string, an textmem.Analyzer) (int, string) {
	wc := words(correction)
	same := func(t string) bool { return strings.Join(words(t), " ") == strings.Join(wc, " ") }
	for i, t := range texts {
		if !same(t) && Contradicts(t, correction, an) {
			return i, MatchLiking
		}
	}
	best, bestN := -1, 1
	for i, t := range texts {
		wt := words(t)
		n := 0
		for n < len(wt) && n < len(wc) && wt[n] == wc[n] {
			n++
		}
		if n > bestN && n < len(wt) && n < len(wc) {
			best, bestN = i, n
		}
	}
	if best >= 0 {
		return best, MatchSubject
	}
	terms := func(s string) map[string]bool {
		set := map[string]bool{}
		an.Terms(s, func(w string) { set[w] = true })
		return set
	}
	tc := terms(correction)
	bestS := 0.0
	for i, t := range texts {
		if same(t) {
			continue
		}
		tt := terms(t)
		n := 0
		for w := range tt {
			if tc[w] {
				n++
			}
		}
		if n == 0 {
			continue
		}
		if s := float64(n) / float64(min(len(tt), len(tc))); s >= OverlapAt && s > bestS {
			best, bestS = i, s
		}
	}
	if best >= 0 {
		return best, MatchOverlap
	}
	return -1, ""
}
