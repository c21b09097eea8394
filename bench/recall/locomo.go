package recall

import (
	"encoding/json"
	"fmt"
	"os"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"
)

// sample is one LoCoMo conversation with its questions, as in the official
// locomo10.json (github.com/snap-research/locomo, data/locomo10.json).
type sample struct {
	ID       string
	SpeakerA string
	SpeakerB string
	Sessions []session
	QA       []qa
}

type session struct {
	N     int       // 1-based session number, as in "session_3"
	Date  time.Time // session_N_date_time, UTC; zero if missing or unparsable
	Turns []turn
}

type turn struct {
	Speaker string `json:"speaker"`
	DiaID   string `json:"dia_id"`
	Text    string `json:"text"`
	Caption string `json:"blip_caption"`
}

type qa struct {
	Question string   `json:"question"`
	Evidence []string `json:"evidence"`
	Category int      `json:"category"`
}

type rawSample struct {
	SampleID     string                     `json:"sample_id"`
	Conversation map[string]json.RawMessage `json:"conversation"`
	QA           []qa                       `json:"qa"`
}

var sessionKey = regexp.MustCompile(`^session_(\d+)$`)

// loadLoCoMo reads a LoCoMo file: a JSON array of samples.
func loadLoCoMo(path string) ([]sample, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("recall: %w", err)
	}
	var raw []rawSample
	if err := json.Unmarshal(b, &raw); err != nil {
		return nil, fmt.Errorf("%w: %s: %w", ErrBadLoCoMo, path, err)
	}
	out := make([]sample, 0, len(raw))
	for i, r := range raw {
		s := sample{ID: r.SampleID, QA: r.QA}
		if s.ID == "" {
			s.ID = fmt.Sprintf("conv-%d", i)
		}
		str := func(k string) string {
			var v string
			_ = json.Unmarshal(r.Conversation[k], &v)
			return v
		}
		s.SpeakerA, s.SpeakerB = str("speaker_a"), str("speaker_b")
		for k, v := range r.Conversation {
			m := sessionKey.FindStringSubmatch(k)
			if m == nil {
				continue
			}
			n, _ := strconv.Atoi(m[1])
			var turns []turn
			if err := json.Unmarshal(v, &turns); err != nil {
				return nil, fmt.Errorf("%w: %s %s: %w", ErrBadLoCoMo, s.ID, k, err)
			}
			date, _ := parseSessionDate(str(k + "_date_time"))
			s.Sessions = append(s.Sessions, session{N: n, Date: date, Turns: turns})
		}
		sort.Slice(s.Sessions, func(i, j int) bool { return s.Sessions[i].N < s.Sessions[j].N })
		out = append(out, s)
	}
	return out, nil
}

// parseSessionDate parses LoCoMo's "1:56 pm on 8 May, 2023". The data
// carries no time zone; the time is taken as UTC.
func parseSessionDate(s string) (time.Time, error) {
	s = strings.TrimSpace(s)
	for _, layout := range []string{"3:04 pm on 2 January, 2006", "3:04 pm on 2 Jan, 2006"} {
		if t, err := time.ParseInLocation(layout, s, time.UTC); err == nil {
			return t, nil
		}
	}
	return time.Time{}, fmt.Errorf("recall: session date %q", s)
}

var evidenceID = regexp.MustCompile(`^D(\d+):(\d+)$`)

// validEvidence reports whether id is well formed ("D<session>:<turn>").
func validEvidence(id string) bool {
	return evidenceID.MatchString(id)
}
