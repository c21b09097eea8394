package toolcall

import (
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/memosrt/memosrt/errkind"
	"github.com/memosrt/memosrt/runtime/grammar"
)

var weather = Tool{Name: "get_weather", Description: "Weather in a city",
	Parameters: json.RawMessage(`{"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}`)}

func TestOn(t *testing.T) {
	cases := []struct {
		s    Spec
		want bool
	}{
		{Spec{}, false},
		{Spec{Choice: Required}, false},
		{Spec{Tools: []Tool{weather}}, true},
		{Spec{Tools: []Tool{weather}, Choice: Auto}, true},
		{Spec{Tools: []Tool{weather}, Choice: Required}, true},
		{Spec{Tools: []Tool{weather}, Choice: None}, false},
	}
	for _, c := range cases {
		if got := c.s.On(); got != c.want {
			t.Errorf("%+v.On() = %v, want %v", c.s, got, c.want)
		}
	}
}

// wantGrammar is the grammar Spec.Grammar should build: an array of 1 to
// max calls, each {"name": const, "arguments": the tool's schema}.
func wantGrammar(t *testing.T, max int, orText bool, tools ...Tool) string {
	t.Helper()
	var branches []string
	for _, tl := range tools {
		params := string(tl.Parameters)
		if params == "" {
			params = `{"type":"object"}`
		}
		name, _ := json.Marshal(tl.Name)
		branches = append(branches, `{"type":"object","properties":{"name":{"const":`+string(name)+
			`},"arguments":`+params+`},"required":["name","arguments"],"additionalProperties":false}`)
	}
	schema := fmt.Sprintf(`{"type":"array","minItems":1,"maxItems":%d,"items":{"anyOf":[%s]}}`, max, strings.Join(branches, ","))
	g, err := grammar.FromSchema([]byte(schema))
	if err != nil {
		t.Fatal(err)
	}
	if orText {
		if g, err = grammar.OrText(g, '['); err != nil {
			t.Fatal(err)
		}
	}
	return g
}

func TestGrammar(t *testing.T) {
	echo := Tool{Name: "echo"} // no parameters: any object
	cases := []struct {
		name string
		s    Spec
		want string
	}{
		{"no tools", Spec{}, ""},
		{"choice none", Spec{Tools: []Tool{weather}, Choice: None}, ""},
		{"auto: prose or calls", Spec{Tools: []Tool{weather, echo}}, wantGrammar(t, DefaultMaxCalls, true, weather, echo)},
		{"required: calls only", Spec{Tools: []Tool{weather, echo}, Choice: Required}, wantGrammar(t, DefaultMaxCalls, false, weather, echo)},
		{"named tool", Spec{Tools: []Tool{weather, echo}, Choice: Required, Name: "echo"}, wantGrammar(t, DefaultMaxCalls, false, echo)},
		{"one call", Spec{Tools: []Tool{weather}, Choice: Required, MaxCalls: 1}, wantGrammar(t, 1, false, weather)},
	}
	for _, c := range cases {
		got, err := c.s.Grammar()
		if err != nil {
			t.Errorf("%s: %v", c.name, err)
			continue
		}
		if got != c.want {
			t.Errorf("%s: grammar\n%s\nwant\n%s", c.name, got, c.want)
		}
	}
	auto, _ := Spec{Tools: []Tool{weather}}.Grammar()
	// prose, or an array of the one tool's calls, up to DefaultMaxCalls
	for _, part := range []string{"root ::= structured | prose", `"\"get_weather\""`, `"\"city\""`, `( "," ws s4 ){0,7}`} {
		if !strings.Contains(auto, part) {
			t.Errorf("auto grammar lacks %s:\n%s", part, auto)
		}
	}
}

func TestGrammarErrors(t *testing.T) {
	cases := []struct {
		name       string
		s          Spec
		field, msg string
	}{
		{"bad choice", Spec{Tools: []Tool{weather}, Choice: "any"}, "tool_choice", `want auto, none or required, got "any"`},
		{"name without required", Spec{Tools: []Tool{weather}, Name: "get_weather"}, "tool_choice", `a named tool is a required choice, got ""`},
		{"required without tools", Spec{Choice: Required}, "tool_choice", "required without tools"},
		{"negative cap", Spec{Tools: []Tool{weather}, MaxCalls: -1}, "max_tool_calls", "-1 < 0"},
		{"bad name", Spec{Tools: []Tool{weather, {Name: "get weather"}}}, "tools[1].function.name", `"get weather" is not a tool name (1..64 of [A-Za-z0-9_-])`},
		{"empty name", Spec{Tools: []Tool{{}}}, "tools[0].function.name", `"" is not a tool name (1..64 of [A-Za-z0-9_-])`},
		{"twice", Spec{Tools: []Tool{weather, weather}}, "tools[1].function.name", `tool "get_weather" listed twice`},
		{"not an object", Spec{Tools: []Tool{{Name: "f", Parameters: json.RawMessage(`{"type":"string"}`)}}}, "tools[0].function.parameters", `the arguments must be an object, got type "string"`},
		{"unknown tool", Spec{Tools: []Tool{weather}, Choice: Required, Name: "echo"}, "tool_choice", `tool "echo" is not among the tools`},
		{"with a format", Spec{Tools: []Tool{weather}, Format: true}, "tools", "tools and a response format cannot be combined"},
	}
	for _, c := range cases {
		g, err := c.s.Grammar()
		var fe *errkind.FieldError
		if !errors.As(err, &fe) {
			t.Errorf("%s: grammar %q, err %v, want a *errkind.FieldError", c.name, g, err)
			continue
		}
		if fe.Field != c.field || fe.Msg != c.msg {
			t.Errorf("%s: %s: %s, want %s: %s", c.name, fe.Field, fe.Msg, c.field, c.msg)
		}
		if errkind.Of(err) != errkind.Invalid {
			t.Errorf("%s: kind %v", c.name, errkind.Of(err))
		}
	}
	// a schema keyword the grammar does not enforce is refused, naming the tool
	_, err := Spec{Tools: []Tool{{Name: "f", Parameters: json.RawMessage(`{"type":"object","properties":{"n":{"type":"integer","minimum":1}}}`)}}}.Grammar()
	var fe *errkind.FieldError
	if !errors.As(err, &fe) || fe.Field != "tools[0].function.parameters" || !strings.Contains(fe.Msg, "minimum") {
		t.Errorf("unsupported keyword: %v", err)
	}
	// with the tools off, a format is no conflict
	if g, err := (Spec{Tools: []Tool{weather}, Choice: None, Format: true}).Grammar(); g != "" || err != nil {
		t.Errorf("choice none with a format: %q, %v", g, err)
	}
}

func TestTurn(t *testing.T) {
	got := Turn([]Tool{weather, {Name: "echo"}})
	want := "You can call tools. To call them, answer with only a JSON array of calls, " +
		`[{"name": TOOL, "arguments": {...}}], and nothing else; their results come back as tool turns.` + "\nTools:\n" +
		`{"name":"get_weather","description":"Weather in a city","parameters":{"type":"object","properties":{"city":{"type":"string"}},"required":["city"]}}` + "\n" +
		`{"name":"echo"}`
	if got != want {
		t.Fatalf("Turn:\n%s\nwant:\n%s", got, want)
	}
}

func TestText(t *testing.T) {
	calls := []Call{
		{ID: "call_1", Name: "get_weather", Arguments: json.RawMessage(`{ "city": "Paris" }`)},
		{ID: "call_2", Name: "echo"},
		{Name: "bad", Arguments: json.RawMessage(`{not json`)},
	}
	cases := []struct {
		content string
		calls   []Call
		want    string
	}{
		{"just prose", nil, "just prose"},
		{"", calls, `[{"name":"get_weather","arguments":{"city":"Paris"}},{"name":"echo","arguments":{}},{"name":"bad","arguments":{}}]`},
		{"Let me look.", calls[:1], "Let me look.\n" + `[{"name":"get_weather","arguments":{"city":"Paris"}}]`},
	}
	for _, c := range cases {
		if got := Text(c.content, c.calls); got != c.want {
			t.Errorf("Text(%q, %d calls) = %q, want %q", c.content, len(c.calls), got, c.want)
		}
	}
}

var idForm = regexp.MustCompile(`^call_[0-9a-f]{24}$`)

func TestParse(t *testing.T) {
	calls, ok := Parse(" \n" + `[{"name": "get_weather", "arguments": {"city": "Paris"}}, {"name":"echo","arguments":{}}]` + "\n")
	if !ok || len(calls) != 2 {
		t.Fatalf("Parse = %+v, %v", calls, ok)
	}
	if calls[0].Name != "get_weather" || string(calls[0].Arguments) != `{"city":"Paris"}` ||
		calls[1].Name != "echo" || string(calls[1].Arguments) != `{}` {
		t.Errorf("calls %+v", calls)
	}
	for _, c := range calls {
		if !idForm.MatchString(c.ID) {
			t.Errorf("id %q", c.ID)
		}
	}
	if calls[0].ID == calls[1].ID {
		t.Errorf("two calls share id %q", calls[0].ID)
	}
	// what the grammar writes comes back as the text it was
	if got := Text("", calls); got != `[{"name":"get_weather","arguments":{"city":"Paris"}},{"name":"echo","arguments":{}}]` {
		t.Errorf("Text of parsed calls = %q", got)
	}
	for _, prose := range []string{"", "It is sunny.", "[]", `[{"name": "get_weather", "arguments": {"ci`, "[1, 2"} {
		if calls, ok := Parse(prose); ok || calls != nil {
			t.Errorf("Parse(%q) = %+v, %v, want no calls", prose, calls, ok)
		}
	}
}

func TestNewID(t *testing.T) {
	seen := map[string]bool{}
	for range 100 {
		id := NewID()
		if !idForm.MatchString(id) {
			t.Fatalf("id %q", id)
		}
		if seen[id] {
			t.Fatalf("id %q twice", id)
		}
		seen[id] = true
	}
}

func TestFilter(t *testing.T) {
	cases := []struct {
		name     string
		required bool
		pieces   []string
		passed   []string
		held     string
	}{
		{"prose streams", false, []string{"It ", "is ", "sunny."}, []string{"It ", "is ", "sunny."}, ""},
		{"spaces wait for the first word", false, []string{" ", "\n", "Hi", "!"}, []string{" \nHi", "!"}, ""},
		{"calls are held", false, []string{" ", `[{"name"`, `:"echo","arguments":{}}]`}, nil, ` [{"name":"echo","arguments":{}}]`},
		{"required holds all", true, []string{"Hello", " there"}, nil, "Hello there"},
	}
	for _, c := range cases {
		var passed []string
		f := NewFilter(func(s string) error { passed = append(passed, s); return nil }, c.required)
		for _, p := range c.pieces {
			if err := f.OnText(p); err != nil {
				t.Fatalf("%s: %v", c.name, err)
			}
		}
		if !slices.Equal(passed, c.passed) || f.Held() != c.held {
			t.Errorf("%s: passed %q held %q, want %q held %q", c.name, passed, f.Held(), c.passed, c.held)
		}
	}
	stop := errors.New("client gone")
	f := NewFilter(func(string) error { return stop }, false)
	if err := f.OnText("Hi"); err != stop {
		t.Errorf("OnText = %v, want next's error", err)
	}
	if err := f.OnText(" there"); err != stop {
		t.Errorf("OnText after the decision = %v, want next's error", err)
	}
}
