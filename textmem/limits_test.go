package textmem

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
)

// wordsText returns a text of at least n bytes drawn from distinct random
// words (w0 .. w<distinct-1> in hex).
func wordsText(n, distinct int) string {
	rng := rand.New(rand.NewPCG(1, 2))
	var b strings.Builder
	for b.Len() < n {
		fmt.Fprintf(&b, "w%x ", rng.IntN(distinct))
	}
	return b.String()
}

// TestTextRoundTrip: texts come back byte for byte, from the live store and
// after a reopen: 1 MiB (with MaxTextBytes raised), CJK, emoji (ZWJ
// sequences, flags, skin tones), combining marks, mixed scripts.
func TestTextRoundTrip(t *testing.T) {
	ctx := context.Background()
	texts := map[string]string{
		"1MiB":      wordsText(1<<20, 2000),
		"cjk":       "我的猫叫小白，它喜欢在阳光下睡觉。日本語のテキストも大丈夫です。한국어 문장도 저장됩니다.",
		"emoji":     "👩‍👩‍👧‍👦 family, 🏳️‍🌈 flag, 👍🏽 thumbs, 🇫🇷🇯🇵 flags, 🧑🏿‍💻 coder",
		"combining": "e\u0301 (e + acute) vs \u00e9, Zalgo: Z\u0351\u0337a\u0352l\u0353g\u0354o, Hangul jamo \u1100\u1161",
		"mixed":     "Ελληνικά, Русский, עברית, العربية, हिन्दी, ไทย\ttab\nnewline\r\nCRLF \u200b zero-width",
	}
	dir := t.TempDir()
	s, db := openStore(t, dir, Options{MaxTextBytes: 2 << 20})
	ids := map[string]string{}
	for name, text := range texts {
		m, err := s.Add(ctx, "c", Memory{Text: text})
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if m.Text != text {
			t.Fatalf("%s: Add returned other bytes", name)
		}
		ids[name] = m.ID
	}
	check := func(s *Store, when string) {
		for name, text := range texts {
			got, err := s.Get(ctx, "c", ids[name])
			if err != nil || got.Text != text {
				t.Errorf("%s %s: %d bytes back (%v), want %d byte-identical", when, name, len(got.Text), err, len(text))
			}
		}
		hits, err := s.Search(ctx, "c", "阳光", 3)
		if err != nil || len(hits) != 1 || hits[0].Memory.ID != ids["cjk"] {
			t.Errorf("%s: CJK search: %v %v", when, texts, err)
		}
	}
	check(s, "live")
	s.Close()
	db.Close()
	s, _ = openStore(t, dir, Options{MaxTextBytes: 2 << 20})
	check(s, "reopened")
}

// TestTextLimits: hostile or oversized texts are refused with the sentinel
// that says why, and nothing is stored.
func TestTextLimits(t *testing.T) {
	ctx := context.Background()
	cases := []struct {
		name string
		opts Options
		text string
		want error
	}{
		{"empty", Options{}, "", ErrEmptyText},
		{"whitespace", Options{}, " \t\n\u00a0\u3000", ErrEmptyText},
		{"invalid-utf8", Options{}, "ok \xff\xfe bad", ErrInvalidUTF8},
		{"truncated-utf8", Options{}, "猫"[:2], ErrInvalidUTF8},
		{"surrogate-utf8", Options{}, "\xed\xa0\x80", ErrInvalidUTF8},
		{"over-default-64KiB", Options{}, strings.Repeat("a", 64<<10+1), ErrTooLarge},
		// 1 MiB of 40 000 distinct terms: postings beyond one Badger
		// transaction, refused whole
		{"too-many-terms", Options{MaxTextBytes: 2 << 20}, wordsText(1<<20, 40000), ErrTooLarge},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if tc.name == "too-many-terms" && pgServer != nil {
				t.Skip("a limit of Badger's transactions; PostgreSQL's have none this text reaches")
			}
			s, _ := openStore(t, t.TempDir(), tc.opts)
			if _, err := s.Add(ctx, "c", Memory{Text: tc.text}); !errors.Is(err, tc.want) {
				t.Fatalf("Add: %v, want %v", err, tc.want)
			}
			m, err := s.Add(ctx, "c", Memory{Text: "a valid memory"})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := s.Update(ctx, "c", m.ID, tc.text); !errors.Is(err, tc.want) {
				t.Fatalf("Update: %v, want %v", err, tc.want)
			}
			list, err := s.List(ctx, "c")
			if err != nil || len(list) != 1 || list[0].Text != "a valid memory" || list[0].Version != 1 {
				t.Fatalf("after refusals: %+v %v", list, err)
			}
		})
	}
	// exactly the text limit is accepted; a word as long as the backend's
	// key limit allows too, one byte more is refused with the limit named
	s, _ := openStore(t, t.TempDir(), Options{})
	if _, err := s.Add(ctx, "c", Memory{Text: strings.Repeat("a ", 32<<10)}); err != nil {
		t.Fatalf("64 KiB: %v", err)
	}
	word := s.be.MaxKey("c") - len("p/") - 1 - 24 // postKey with a 24-byte id
	if pgServer == nil && word != 64969 {
		t.Errorf("Badger takes words up to %d bytes, want 64969", word)
	}
	if _, err := s.Add(ctx, "c", Memory{Text: strings.Repeat("b", word)}); err != nil {
		t.Fatalf("a %d-byte word: %v", word, err)
	}
	_, err := s.Add(ctx, "c", Memory{Text: strings.Repeat("c", word+1)})
	if want := fmt.Sprintf("a word of %d bytes; the index takes words up to %d bytes", word+1, word); !errors.Is(err, ErrTooLarge) || !strings.Contains(err.Error(), want) {
		t.Fatalf("a %d-byte word: %v", word+1, err)
	}
}

// TestSameMemoryConcurrently: goroutines adding the same memory at once to
// each of two cubes store one copy per cube, and all get its id.
func TestSameMemoryConcurrently(t *testing.T) {
	ctx := context.Background()
	s, _ := openStore(t, t.TempDir(), Options{})
	const n = 16
	got := make([][2]string, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			for c, cube := range []string{"a", "b"} {
				m, err := s.Add(ctx, cube, Memory{Text: "Lily's cat is called Kitty."})
				if err != nil {
					t.Error(err)
					return
				}
				got[i][c] = m.ID
			}
		})
	}
	wg.Wait()
	for c, cube := range []string{"a", "b"} {
		list, err := s.List(ctx, cube)
		if err != nil || len(list) != 1 {
			t.Fatalf("cube %s holds %d copies (%v)", cube, len(list), err)
		}
		for i := range n {
			if got[i][c] != list[0].ID {
				t.Fatalf("cube %s: goroutine %d got id %s, stored %s", cube, i, got[i][c], list[0].ID)
			}
		}
	}
	if got[0][0] == got[0][1] {
		t.Fatal("the two cubes share a memory id")
	}
}
