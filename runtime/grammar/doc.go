// Package grammar turns JSON output formats into GBNF, the grammar language
// of llama.cpp's grammar sampler (llama_sampler_init_grammar; the format is
// described in llama.cpp's grammars/README.md). It serves Ollama's "format"
// ("json" or a JSON schema) and OpenAI's "response_format" (json_object,
// json_schema).
//
// JSON produces a grammar for any JSON object. FromSchema converts a subset
// of JSON Schema: type (one or a list); properties, required (names among
// the properties) and additionalProperties false for objects; items,
// minItems and maxItems (up to 256) for arrays; minLength and maxLength (up
// to 256 characters, escapes counting as one) for strings; enum and const (alone or
// with a type every value has); anyOf; oneOf when its branches cannot
// overlap (distinct types, or distinct constants); and the annotations
// title, description, default, examples, $schema, $id, $comment and format
// (ignored). Object and array keywords without a type imply it. Every other
// keyword, or combination, is refused with ErrUnsupported rather than
// silently not enforced. Properties are generated in the schema's order;
// optional ones are generated too (the output still satisfies the schema).
// An enum or anyOf/oneOf takes at most MaxAlternatives alternatives and the
// grammar at most MaxGrammarBytes.
//
// Pure Go; the grammar text is checked by llama.cpp when the sampler is made.
package grammar
