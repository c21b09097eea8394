package convmem

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"

	"github.com/memosrt/memosrt/textmem"
)

func TestCorrectionText(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"no, my dog is Rex", "my dog is Rex"},
		{"No. Actually: my dog is Rex.", "my dog is Rex."},
		{"  wrong - I live in Oslo", "I live in Oslo"},
		{"That's wrong, I hate tea", "I hate tea"},
		{"nobody likes Max", "nobody likes Max"},
		{"my dog is Rex", "my dog is Rex"},
		{"no!", ""},
		{"Actually", ""},
	} {
		if got := CorrectionText(c.in); got != c.want {
			t.Errorf("CorrectionText(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}

func TestMatchCorrection(t *testing.T) {
	an := textmem.EnglishAnalyzer{}
	for _, c := range []struct {
		correction string
		texts      []string
		i          int
		how        string
	}{
		{"my dog is Rex", []string{"Tom flies a blue kite.", "my dog is Max"}, 1, MatchSubject},
		{"My dog is Rex", []string{"My dog is Max.", "my dog is a black labrador"}, 0, MatchSubject},
		{"Lily has a dog named Rex", []string{"Lily has a cat.", "Lily has a dog named Max."}, 1, MatchSubject},
		{"I hate tea", []string{"I like coffee", "I love tea"}, 1, MatchLiking},
		{"the kite is green", []string{"my dog is Max", "Tom flies a blue kite"}, 1, MatchOverlap},
		{"my dog is Max", []string{"my dog is Max."}, -1, ""},
		{"I live in Oslo", []string{"my dog is Max", "Tom flies a blue kite"}, -1, ""},
		{"anything", nil, -1, ""},
	} {
		if i, how := MatchCorrection(c.correction, c.texts, an); i != c.i || how != c.how {
			t.Errorf("MatchCorrection(%q, %q) = %d %q, want %d %q", c.correction, c.texts, i, how, c.i, c.how)
		}
	}
}

// The response log keeps the newest MaxResponses of a cube, oldest
// dropped; "" names the latest; an unknown id is ErrNotFound.
func TestResponseLog(t *testing.T) {
	s := openStore(t, Options{})
	ctx := context.Background()
	if _, err := s.Response(ctx, "c", ""); !errors.Is(err, ErrNotFound) {
		t.Fatalf("empty log: %v", err)
	}
	n := MaxResponses + 3
	for i := range n {
		r := ResponseRecord{ID: fmt.Sprintf("resp_%04d", i), Cube: "c", RetrievedIDs: []string{fmt.Sprint(i)}, PackIDs: []string{"p", fmt.Sprint(i)}}
		if err := s.PutResponse(ctx, r); err != nil {
			t.Fatal(err)
		}
	}
	all, err := s.Responses(ctx, "c")
	if err != nil || len(all) != MaxResponses || all[0].ID != "resp_0003" || all[len(all)-1].ID != fmt.Sprintf("resp_%04d", n-1) {
		t.Fatalf("log: %d records from %q, %v", len(all), all[0].ID, err)
	}
	if r, err := s.Response(ctx, "c", ""); err != nil || r.ID != fmt.Sprintf("resp_%04d", n-1) {
		t.Fatalf("latest: %+v %v", r, err)
	}
	if r, err := s.Response(ctx, "c", "resp_0010"); err != nil || !slices.Equal(r.Used(), []string{"10", "p"}) {
		t.Fatalf("resp_0010: %+v (used %q) %v", r, r.Used(), err)
	}
	if _, err := s.Response(ctx, "c", "resp_0002"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("dropped: %v", err)
	}
	if err := s.PutResponse(ctx, ResponseRecord{Cube: "c"}); err == nil {
		t.Fatal("a response without id stored")
	}
}
