package upstream

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"

	"github.com/memosrt/memosrt/errkind"
	"github.com/memosrt/memosrt/layout"
	"github.com/memosrt/memosrt/runtime/slots"
	"github.com/memosrt/memosrt/toolcall"
)

func TestStatusErr(t *testing.T) {
	for _, c := range []struct {
		code int
		kind errkind.Kind
		is   error
		msg  string
	}{
		{429, errkind.Busy, slots.ErrQueueFull, "upstream: slow down"},
		{400, errkind.Invalid, nil, "upstream: slow down"},
		{401, errkind.Upstream, ErrUpstream, "HTTP 401; check the upstream API key"},
		{403, errkind.Upstream, ErrUpstream, "HTTP 403; check the upstream API key"},
		{404, errkind.NotFound, ErrModelNotFound, "model not found: slow down"},
		{500, errkind.Upstream, ErrUpstream, "openai upstream answered HTTP 500: slow down"},
		{503, errkind.Upstream, ErrUpstream, "HTTP 503"},
	} {
		t.Run(fmt.Sprint(c.code), func(t *testing.T) {
			err := statusErr(APIOpenAI, c.code, "slow down")
			if errkind.Of(err) != c.kind || c.is != nil && !errors.Is(err, c.is) || !strings.Contains(err.Error(), c.msg) {
				t.Fatalf("%d: %v (kind %s), want kind %s, %v, %q", c.code, err, errkind.Of(err), c.kind, c.is, c.msg)
			}
			var fe *errkind.FieldError
			if c.code == 400 && (!errors.As(err, &fe) || fe.Field != "upstream") {
				t.Fatalf("400: %#v, want a FieldError on upstream", err)
			}
		})
	}
}

func TestAPIBase(t *testing.T) {
	for in, want := range map[string]string{
		"http://127.0.0.1:8000":          "http://127.0.0.1:8000/v1/",
		"http://127.0.0.1:8000/":         "http://127.0.0.1:8000/v1/",
		"http://127.0.0.1:8000/v1":       "http://127.0.0.1:8000/v1/",
		"http://127.0.0.1:8000/v1/":      "http://127.0.0.1:8000/v1/",
		"https://example.com/api/v1":     "https://example.com/api/v1/",
		"https://example.com/openai":     "https://example.com/openai/v1/",
		"http://h:1/v1?api-version=2024": "http://h:1/v1/?api-version=2024",
	} {
		if got := apiBase(in); got != want {
			t.Errorf("apiBase(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestValidate(t *testing.T) {
	for _, c := range []struct {
		o    Options
		want string
	}{
		{Options{URL: "http://h:1", Model: "m"}, ""},
		{Options{API: APIOpenAI, URL: "https://h/v1", Model: "m", Timeout: 1}, ""},
		{Options{API: "grpc", URL: "http://h:1", Model: "m"}, `Upstream API "grpc"`},
		{Options{API: APIOpenAI, Model: "m"}, "Upstream needs URL and Model"},
		{Options{API: APIOpenAI, URL: "http://h:1"}, "Upstream needs URL and Model"},
		{Options{API: APIOpenAI, URL: "h:1", Model: "m"}, "not an absolute http(s) URL"},
		{Options{API: APIOpenAI, URL: "ftp://h/x", Model: "m"}, "not an absolute http(s) URL"},
		{Options{URL: "http://h:1", Model: "m", Timeout: -1}, "Timeout -1ns < 0"},
	} {
		err := c.o.Validate()
		if c.want == "" && err != nil || c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)) {
			t.Errorf("%v: %v, want %q", c.o, err, c.want)
		}
		if _, nerr := New(c.o); (nerr == nil) != (err == nil) {
			t.Errorf("%v: New %v, Validate %v", c.o, nerr, err)
		}
	}
}

// The API key is in no printed or logged form of the options.
func TestOptionsHideKey(t *testing.T) {
	o := Options{API: APIOpenAI, URL: "http://h:1", Model: "m", APIKey: "sk-very-secret"}
	var buf bytes.Buffer
	slog.New(slog.NewJSONHandler(&buf, nil)).Info("upstream", "opts", o)
	for _, s := range []string{fmt.Sprint(o), fmt.Sprintf("%v %+v %#v %s", o, o, o, o), buf.String()} {
		if strings.Contains(s, "sk-very-secret") || !strings.Contains(s, "http://h:1") {
			t.Fatalf("printed as %s", s)
		}
	}
}

// Earlier calls and their results become tool_calls and tool turns paired
// by id; prose, even with brackets, stays prose.
func TestChatMessages(t *testing.T) {
	calls := []toolcall.Call{{Name: "get_weather", Arguments: json.RawMessage(`{"city":"Paris"}`)}, {Name: "get_time", Arguments: json.RawMessage(`{"zone":"CET"}`)}}
	msgs := []layout.Message{
		{Role: "system", Content: "be brief"},
		{Role: "user", Content: "weather and time?"},
		{Role: "assistant", Content: toolcall.Text("Let me look.", calls)},
		{Role: "tool", Content: "sunny"},
		{Role: "tool", Content: "12:00"},
		{Role: "assistant", Content: "[1, 2] is a list\n[not calls]"},
		{Role: "assistant", Content: toolcall.Text("", calls[:1])},
		{Role: "tool", Content: "rain"},
	}
	b, err := json.Marshal(chatMessages(msgs))
	if err != nil {
		t.Fatal(err)
	}
	want := `[{"content":"be brief","role":"system"},{"content":"weather and time?","role":"user"},` +
		`{"content":"Let me look.","tool_calls":[{"id":"call_1","function":{"arguments":"{\"city\":\"Paris\"}","name":"get_weather"},"type":"function"},` +
		`{"id":"call_2","function":{"arguments":"{\"zone\":\"CET\"}","name":"get_time"},"type":"function"}],"role":"assistant"},` +
		`{"content":"sunny","tool_call_id":"call_1","role":"tool"},{"content":"12:00","tool_call_id":"call_2","role":"tool"},` +
		`{"content":"[1, 2] is a list\n[not calls]","role":"assistant"},` +
		`{"tool_calls":[{"id":"call_3","function":{"arguments":"{\"city\":\"Paris\"}","name":"get_weather"},"type":"function"}],"role":"assistant"},` +
		`{"content":"rain","tool_call_id":"call_3","role":"tool"}]`
	if string(b) != want {
		t.Fatalf("messages\n%s\nwant\n%s", b, want)
	}
}

func TestAddCall(t *testing.T) {
	var r Result
	if err := addCall(&r, "call_a", "f", ` { "x" : 1 } `); err != nil {
		t.Fatal(err)
	}
	if err := addCall(&r, "", "g", ""); err != nil {
		t.Fatal(err)
	}
	if string(r.ToolCalls[0].Arguments) != `{"x":1}` || r.ToolCalls[0].ID != "call_a" || string(r.ToolCalls[1].Arguments) != `{}` ||
		!strings.HasPrefix(r.ToolCalls[1].ID, "call_") {
		t.Fatalf("calls %+v", r.ToolCalls)
	}
	for _, bad := range []string{`{"x":`, `[1]`, `"s"`} {
		if err := addCall(&r, "", "f", bad); !errors.Is(err, ErrUpstream) {
			t.Errorf("arguments %q: %v, want ErrUpstream", bad, err)
		}
	}
}
