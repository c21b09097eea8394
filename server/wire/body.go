package wire

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"time"
	"unicode/utf8"
)

// Text in request bodies. encoding/json replaces invalid UTF-8 and lone
// surrogate escapes ("\ud800") with U+FFFD without a word, so a memory
// added with them would be stored altered. CheckJSONText reads the raw
// bytes instead, and Decode and the MCP route refuse such a body with a
// 400 naming the field.

// CheckJSONText returns a *memosrt.FieldError naming the first string of the
// JSON document b (a key or a value) that holds invalid UTF-8 or a lone
// UTF-16 surrogate escape, nil when every string is valid text. The field
// is the value's path: "text", "messages[1].content", "options.stop[0]";
// a bad key is named by the object holding it, "body" at the top. b is
// expected to be JSON the decoder accepted; what is not JSON is left to
// the decoder's error.
func CheckJSONText(b []byte) error {
	if utf8.Valid(b) && !bytes.Contains(b, []byte(`\u`)) {
		return nil // the common case: nothing to look at
	}
	sc := textScanner{b: b}
	sc.value("")
	return sc.err
}

// textScanner walks a JSON document keeping the path of the value it is
// in; it stops at the first bad string (err) and at anything that is not
// JSON (err stays nil: the decoder reports that).
type textScanner struct {
	b    []byte
	i    int
	err  error
	stop bool
}

func (s *textScanner) ws() {
	for s.i < len(s.b) && (s.b[s.i] == ' ' || s.b[s.i] == '\t' || s.b[s.i] == '\n' || s.b[s.i] == '\r') {
		s.i++
	}
}

func fieldName(path string) string {
	if path == "" {
		return "body"
	}
	return path
}

func (s *textScanner) value(path string) {
	s.ws()
	if s.stop || s.i >= len(s.b) {
		s.stop = true
		return
	}
	switch s.b[s.i] {
	case '{':
		s.i++
		for !s.stop {
			s.ws()
			if s.i < len(s.b) && s.b[s.i] == '}' {
				s.i++
				return
			}
			if s.i >= len(s.b) || s.b[s.i] != '"' {
				s.stop = true
				return
			}
			key, msg := s.str()
			if msg != "" {
				s.fail(fieldName(path), "a field name holds "+msg)
				return
			}
			s.ws()
			if s.i >= len(s.b) || s.b[s.i] != ':' {
				s.stop = true
				return
			}
			s.i++
			p := key
			if path != "" {
				p = path + "." + key
			}
			s.value(p)
			s.ws()
			if s.i < len(s.b) && s.b[s.i] == ',' {
				s.i++
			}
		}
	case '[':
		s.i++
		for n := 0; !s.stop; n++ {
			s.ws()
			if s.i < len(s.b) && s.b[s.i] == ']' {
				s.i++
				return
			}
			s.value(path + "[" + strconv.Itoa(n) + "]")
			s.ws()
			if s.i < len(s.b) && s.b[s.i] == ',' {
				s.i++
			}
		}
	case '"':
		if _, msg := s.str(); msg != "" {
			s.fail(fieldName(path), msg)
		}
	default: // number, true, false, null
		start := s.i
		for s.i < len(s.b) && !bytes.ContainsRune([]byte(",}] \t\r\n"), rune(s.b[s.i])) {
			s.i++
		}
		if s.i == start {
			s.stop = true
		}
	}
}

func (s *textScanner) fail(field, msg string) {
	s.err, s.stop = BadField(field, "%s", msg), true
}

// str reads the string at s.i (its opening quote) and returns its key
// form (escapes kept as written: only for paths) and, when the string is
// not valid text, what is wrong with it.
func (s *textScanner) str() (string, string) {
	s.i++
	start := s.i
	for s.i < len(s.b) {
		c := s.b[s.i]
		switch {
		case c == '"':
			key := string(s.b[start:s.i])
			s.i++
			return key, ""
		case c == '\\':
			if s.i+1 >= len(s.b) {
				s.stop = true
				return "", ""
			}
			if s.b[s.i+1] != 'u' {
				s.i += 2
				continue
			}
			r, ok := hex4(s.b, s.i+2)
			if !ok {
				s.stop = true
				return "", ""
			}
			s.i += 6
			switch {
			case r >= 0xD800 && r < 0xDC00: // high half: a low half must follow
				lo, ok := rune(0), false
				if s.i+1 < len(s.b) && s.b[s.i] == '\\' && s.b[s.i+1] == 'u' {
					lo, ok = hex4(s.b, s.i+2)
				}
				if !ok || lo < 0xDC00 || lo >= 0xE000 {
					return "", fmt.Sprintf(`a lone UTF-16 surrogate \u%04x at byte %d (not valid text)`, r, s.i-6-start)
				}
				s.i += 6
			case r >= 0xDC00 && r < 0xE000:
				return "", fmt.Sprintf(`a lone UTF-16 surrogate \u%04x at byte %d (not valid text)`, r, s.i-6-start)
			}
		case c < utf8.RuneSelf:
			s.i++
		default:
			r, n := utf8.DecodeRune(s.b[s.i:])
			if r == utf8.RuneError && n <= 1 {
				return "", fmt.Sprintf("invalid UTF-8 (byte 0x%02x at byte %d)", c, s.i-start)
			}
			s.i += n
		}
	}
	s.stop = true
	return "", ""
}

// hex4 reads 4 hex digits at b[i:].
func hex4(b []byte, i int) (rune, bool) {
	if i+4 > len(b) {
		return 0, false
	}
	n, err := strconv.ParseUint(string(b[i:i+4]), 16, 16)
	return rune(n), err == nil
}

// Request body deadlines. A client that sends headers and then stalls (a
// Content-Length of 100000 and 10 bytes, or a byte every few seconds)
// would hold a connection and a goroutine for as long as it likes; the
// server gives every request with a body a read deadline on its connection
// (TimeBody), which timedBody lifts once the body has been read to its
// end, so a streamed answer is never cut by it. A body not in by then
// fails its read: the handler answers 408 and the connection is closed.

// ErrBodyTimeout is returned by a request body's Read when the body did
// not arrive within its read deadline (TimeBody); HTTP 408.
var ErrBodyTimeout = errors.New("server: request body not received in time")

// timedBody is a request body read under a connection read deadline.
type timedBody struct {
	io.ReadCloser
	rc        *http.ResponseController
	limit     time.Duration
	onTimeout func() // nil: none
	// done is set by Read at the body's end or its deadline; Read is
	// called by the handler's goroutine only, as net/http requires.
	done bool
}

func (b *timedBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	switch {
	case err == nil || b.done:
	case errors.Is(err, io.EOF):
		b.done = true
		b.rc.SetReadDeadline(time.Time{}) // lifted: the connection may now sit idle under a stream
	case errors.Is(err, os.ErrDeadlineExceeded):
		b.done = true
		if b.onTimeout != nil {
			b.onTimeout()
		}
		return n, fmt.Errorf("%w: body: not complete within %v (the server's body read deadline): %w", ErrBodyTimeout, b.limit, err)
	}
	return n, err
}

// TimeBody puts r's body under a read deadline on its connection, limit
// from now: a Read after it fails with an error wrapping ErrBodyTimeout
// (and calls onTimeout, when not nil, once), and reading the body to its
// end lifts the deadline. A request without a body, a negative limit, or
// a ResponseWriter whose connection has no deadlines (a test recorder)
// leaves r as it is. Call it before the handler reads the body.
func TimeBody(w http.ResponseWriter, r *http.Request, limit time.Duration, onTimeout func()) {
	if limit < 0 || r.Body == nil || r.Body == http.NoBody || r.ContentLength == 0 {
		return
	}
	rc := http.NewResponseController(w)
	if rc.SetReadDeadline(time.Now().Add(limit)) != nil {
		return // not a connection that has deadlines (a test recorder)
	}
	r.Body = &timedBody{ReadCloser: r.Body, rc: rc, limit: limit, onTimeout: onTimeout}
}

// CheckURLText returns a *memosrt.FieldError when the request's decoded path
// ("path") or a query parameter's name or value (named by the parameter)
// holds invalid UTF-8: net/http and url.ParseQuery pass such bytes on
// as they are (%FF decodes to the byte 0xff), and a search for them, or a
// cube named with them, would meet text that is not text. A query that
// does not parse is left to the handler.
func CheckURLText(r *http.Request) error {
	if i := invalidUTF8(r.URL.Path); i >= 0 {
		return BadField("path", "invalid UTF-8 (byte 0x%02x at byte %d)", r.URL.Path[i], i)
	}
	if r.URL.RawQuery == "" {
		return nil
	}
	q, err := url.ParseQuery(r.URL.RawQuery)
	if err != nil {
		return nil
	}
	for k, vs := range q {
		if i := invalidUTF8(k); i >= 0 {
			return BadField("query", "a parameter name holds invalid UTF-8 (byte 0x%02x at byte %d)", k[i], i)
		}
		for _, v := range vs {
			if i := invalidUTF8(v); i >= 0 {
				return BadField(k, "invalid UTF-8 (byte 0x%02x at byte %d)", v[i], i)
			}
		}
	}
	return nil
}

// invalidUTF8 is the index of the first byte of s that does not start a
// valid UTF-8 sequence, -1 when s is valid.
func invalidUTF8(s string) int {
	for i := 0; i < len(s); {
		c, n := utf8.DecodeRuneInString(s[i:])
		if c == utf8.RuneError && n <= 1 {
			return i
		}
		i += n
	}
	return -1
}
