package server

import (
	"errors"
	"strings"

	"github.com/memosrt/memosrt"
)

// memosrt checks every option's range once for all routes and names the
// field as Ollama's options have it ("options.top_k: -7 < 0 (0: off)");
// wireField renames it to where the request's own route carries the
// option, so the message is the same on every route and the field is the
// one the client sent.

// openAIOptions are the options the OpenAI routes carry under another
// name than their own (memosrt's extensions keep Ollama's names, top
// level).
var openAIOptions = map[string]string{"num_predict": "max_tokens"}

// nativeSampling are the options POST /v1/generate carries in "sampling".
var nativeSampling = map[string]bool{"temperature": true, "top_k": true, "top_p": true, "min_p": true,
	"repeat_penalty": true, "repeat_last_n": true, "seed": true}

// wireField returns err with a *memosrt.FieldError about an option
// ("options.NAME", "options.NAME[i]") renamed for the route at path; other
// errors, and every error on the Ollama routes, as they are.
func wireField(path string, err error) error {
	var fe *memosrt.FieldError
	if err == nil || strings.HasPrefix(path, "/api/") || !errors.As(err, &fe) {
		return err
	}
	rest, ok := strings.CutPrefix(fe.Field, "options.")
	if !ok {
		return err
	}
	name, index := rest, ""
	if i := strings.IndexByte(rest, '['); i >= 0 {
		name, index = rest[:i], rest[i:]
	}
	switch {
	case path == "/v1/generate" && nativeSampling[name]:
		name = "sampling." + name
	case path != "/v1/generate" && openAIOptions[name] != "":
		name = openAIOptions[name]
	}
	return &memosrt.FieldError{Field: name + index, Msg: fe.Msg}
}
