package wire

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"reflect"
	"strings"

	"github.com/memosrt/memosrt"
)

// Decode reads the request body into v, rejecting trailing data, naming
// the bad field on a type error, and refusing a string that is not valid
// text (invalid UTF-8, a lone surrogate: CheckJSONText) with a 400 naming
// its field. Every route with a JSON body decodes it here (MCP's through
// its handler's check). Errors: a *memosrt.FieldError (400: "body" for an
// empty body, bad JSON or trailing data; the field for a type error or bad
// text), or the body's read error (*http.MaxBytesError: 413; one wrapping
// ErrBodyTimeout: 408).
func Decode(r *http.Request, v any) error { return decodeBody(r, v, false) }

// DecodeStrict is Decode refusing fields v does not have (400 naming the
// field): the memory API, whose fields are all ours. The Ollama and OpenAI
// routes accept unknown fields, as those servers do.
func DecodeStrict(r *http.Request, v any) error { return decodeBody(r, v, true) }

func decodeBody(r *http.Request, v any, strict bool) error {
	raw, err := io.ReadAll(r.Body)
	if err != nil {
		return err // over the body limit (413) or cut (see TimeBody)
	}
	if err := CheckJSONText(raw); err != nil {
		return err
	}
	return decodeRaw(raw, v, strict)
}

func decodeRaw(raw []byte, v any, strict bool) error {
	dec := json.NewDecoder(bytes.NewReader(raw))
	if strict {
		dec.DisallowUnknownFields()
	}
	if err := dec.Decode(v); err != nil {
		if f, ok := strings.CutPrefix(err.Error(), "json: unknown field "); ok {
			return BadField(strings.Trim(f, `"`), "unknown field")
		}
		var mbe *http.MaxBytesError
		var te *json.UnmarshalTypeError
		var se *json.SyntaxError
		switch {
		case errors.As(err, &mbe):
			return err
		case errors.As(err, &te):
			f := te.Field
			for _, emb := range []string{"oaiSampling.", "memoryInput.", "ChatRequest."} { // embedded structs of the surfaces' requests
				f = strings.ReplaceAll(f, emb, "")
			}
			want := te.Type.String()
			if te.Type.Kind() == reflect.Struct {
				want = "a JSON object" // not our Go type's name
			}
			if f == "" {
				f = "body"
			}
			return BadField(f, "want %s, got JSON %s", want, te.Value)
		case errors.As(err, &se):
			return BadField("body", "invalid JSON at byte %d: %v", se.Offset, err)
		case errors.Is(err, io.EOF):
			return BadField("body", "empty request body")
		}
		var fe *memosrt.FieldError
		if errors.As(err, &fe) {
			return err
		}
		return BadField("body", "%v", err)
	}
	if dec.More() {
		return BadField("body", "trailing data after the JSON value")
	}
	return nil
}

// BadField returns a *memosrt.FieldError: a 400 naming the bad request
// field (its message the formatted format and args).
func BadField(field, format string, args ...any) error {
	return &memosrt.FieldError{Field: field, Msg: fmt.Sprintf(format, args...)}
}

// Feedback sets f's Rating and Stars from a request's optional fields
// (nil: none). A rating or stars of 0 given is a *memosrt.FieldError
// naming the field, since memosrt.Feedback's 0 means none; ranges beyond
// that are OS.Feedback's to check.
func Feedback(f memosrt.Feedback, rating, stars *int) (memosrt.Feedback, error) {
	if rating != nil {
		if *rating == 0 {
			return f, BadField("rating", "0: want -1 or 1 (leave rating out for none)")
		}
		f.Rating = *rating
	}
	if stars != nil {
		if *stars == 0 {
			return f, BadField("stars", "0: want 1 to 5 (leave stars out for none)")
		}
		f.Stars = *stars
	}
	return f, nil
}
