// Package grammar turns JSON output formats into GBNF, the grammar language
// of llama.cpp's grammar sampler (llama_sampler_init_grammar; the format is
// described in llama.cpp's grammars/README.md). It serves Ollama's "format"
// ("json" or a JSON schema) and OpenAI's "response_format" (json_object,
// json_schema).
//
// JSON produces a grammar for any JSON object. FromSchema converts a subset
// of JSON Schema: type (one or a list), properties and required, items,
// minItems and maxItems (up to 256), enum, const, anyOf and oneOf, and the
// annotations title, description,
// default, examples, $schema, $id, $comment and format (ignored).
// additionalProperties may be false (nothing extra is ever generated).
// Every other keyword is refused with ErrUnsupported rather than silently
// not enforced. Properties are generated in the schema's order; optional
// ones are generated too (the output still satisfies the schema).
//
// Pure Go; the grammar text is checked by llama.cpp when the sampler is made.
package grammar

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
)

// ErrUnsupported marks a schema this package cannot enforce.
var ErrUnsupported = errors.New("grammar: unsupported JSON schema")

// ErrBadSchema marks a schema that is not valid JSON Schema (or not JSON).
var ErrBadSchema = errors.New("grammar: bad JSON schema")

// Shared rules: whitespace between tokens is one space, or one newline and
// up to 16 spaces or tabs of indentation, so a model cannot pad forever;
// strings follow RFC 8259 section 7.
const common = `ws ::= ( " " | "\n" [ \t]{0,16} )?
value ::= object | array | string | number | boolean | null
object ::= "{" ws ( string ":" ws value ( "," ws string ":" ws value )* )? "}" ws
array ::= "[" ws ( value ( "," ws value )* )? "]" ws
string ::= "\"" char* "\"" ws
char ::= [^"\\\x00-\x1F\x7F] | "\\" ( ["\\/bfnrt] | "u" [0-9a-fA-F]{4} )
number ::= int ( "." [0-9]+ )? ( [eE] [-+]? [0-9]+ )? ws
integer ::= int ws
int ::= "-"? ( "0" | [1-9] [0-9]{0,15} )
boolean ::= ( "true" | "false" ) ws
null ::= "null" ws
`

// JSON is the grammar of one JSON object (Ollama's format "json", OpenAI's
// response_format json_object), whitespace included.
const JSON = "root ::= ws object\n" + common

// FromSchema returns the GBNF grammar of the JSON documents valid under
// schema (JSON text), within the subset described in the package comment.
// Errors wrap ErrBadSchema or ErrUnsupported and name the keyword and path.
func FromSchema(schema []byte) (string, error) {
	n, err := parse(schema)
	if err != nil {
		return "", fmt.Errorf("%w: %v", ErrBadSchema, err)
	}
	c := &conv{}
	root, err := c.rule(n, "$")
	if err != nil {
		return "", err
	}
	return "root ::= ws " + root + "\n" + c.out.String() + common, nil
}

type conv struct {
	out bytes.Buffer
	n   int
}

// annotations carry no constraint.
var annotations = map[string]bool{"title": true, "description": true, "default": true, "examples": true,
	"$schema": true, "$id": true, "$comment": true, "format": true}

// rule writes the rules for schema n and returns the expression that
// matches it (a rule name or a shared rule).
func (c *conv) rule(n *node, path string) (string, error) {
	if n.kind == kBool {
		if n.b {
			return "value", nil
		}
		return "", fmt.Errorf("%w: %s: schema false matches nothing", ErrUnsupported, path)
	}
	if n.kind != kObject {
		return "", fmt.Errorf("%w: %s: a schema must be an object or a boolean", ErrBadSchema, path)
	}
	for _, k := range n.keys {
		switch {
		case annotations[k]:
		case k == "type", k == "properties", k == "required", k == "items", k == "enum", k == "const", k == "anyOf", k == "oneOf",
			k == "minItems", k == "maxItems":
		case k == "additionalProperties":
			if v := n.get(k); v.kind != kBool || v.b {
				return "", fmt.Errorf("%w: %s: additionalProperties other than false", ErrUnsupported, path)
			}
		default:
			return "", fmt.Errorf("%w: %s: keyword %q", ErrUnsupported, path, k)
		}
	}
	if v := n.get("const"); v != nil {
		return c.define(literal(v)), nil
	}
	if v := n.get("enum"); v != nil {
		if v.kind != kArray || len(v.arr) == 0 {
			return "", fmt.Errorf("%w: %s: enum must be a non-empty array", ErrBadSchema, path)
		}
		alts := make([]string, len(v.arr))
		for i, e := range v.arr {
			alts[i] = literal(e)
		}
		return c.define(strings.Join(alts, " | ")), nil
	}
	for _, k := range []string{"anyOf", "oneOf"} {
		if v := n.get(k); v != nil {
			if v.kind != kArray || len(v.arr) == 0 {
				return "", fmt.Errorf("%w: %s: %s must be a non-empty array", ErrBadSchema, path, k)
			}
			if n.get("type") != nil || n.get("properties") != nil || n.get("items") != nil {
				return "", fmt.Errorf("%w: %s: %s next to type, properties or items", ErrUnsupported, path, k)
			}
			alts := make([]string, len(v.arr))
			for i, e := range v.arr {
				r, err := c.rule(e, fmt.Sprintf("%s.%s[%d]", path, k, i))
				if err != nil {
					return "", err
				}
				alts[i] = r
			}
			return c.define(strings.Join(alts, " | ")), nil
		}
	}
	var types []string
	switch t := n.get("type"); {
	case t == nil:
		if n.get("properties") != nil {
			types = []string{"object"}
		} else if n.get("items") != nil {
			types = []string{"array"}
		} else {
			return "value", nil
		}
	case t.kind == kString:
		types = []string{t.str}
	case t.kind == kArray && len(t.arr) > 0:
		for _, e := range t.arr {
			if e.kind != kString {
				return "", fmt.Errorf("%w: %s: type must be a string or an array of strings", ErrBadSchema, path)
			}
			types = append(types, e.str)
		}
	default:
		return "", fmt.Errorf("%w: %s: type must be a string or an array of strings", ErrBadSchema, path)
	}
	alts := make([]string, len(types))
	for i, t := range types {
		var err error
		switch t {
		case "string", "number", "integer", "boolean", "null":
			alts[i] = t
		case "object":
			alts[i], err = c.object(n, path)
		case "array":
			alts[i], err = c.array(n, path)
		default:
			err = fmt.Errorf("%w: %s: unknown type %q", ErrBadSchema, path, t)
		}
		if err != nil {
			return "", err
		}
	}
	if len(alts) == 1 {
		return alts[0], nil
	}
	return c.define(strings.Join(alts, " | ")), nil
}

func (c *conv) object(n *node, path string) (string, error) {
	props := n.get("properties")
	if props == nil {
		return "object", nil
	}
	if props.kind != kObject {
		return "", fmt.Errorf("%w: %s: properties must be an object", ErrBadSchema, path)
	}
	if req := n.get("required"); req != nil {
		if req.kind != kArray {
			return "", fmt.Errorf("%w: %s: required must be an array", ErrBadSchema, path)
		}
		for _, r := range req.arr {
			if r.kind != kString || props.get(r.str) == nil {
				return "", fmt.Errorf("%w: %s: required names %s, which is not among the properties", ErrUnsupported, path, literal(r))
			}
		}
	}
	if len(props.keys) == 0 {
		return c.define(`"{" ws "}" ws`), nil
	}
	parts := make([]string, len(props.keys))
	for i, k := range props.keys {
		r, err := c.rule(props.vals[i], path+"."+k)
		if err != nil {
			return "", err
		}
		name, _ := json.Marshal(k)
		parts[i] = gbnfString(string(name)) + ` ws ":" ws ` + r
	}
	return c.define(`"{" ws ` + strings.Join(parts, ` "," ws `) + ` "}" ws`), nil
}

// maxItemsLimit bounds maxItems: llama.cpp expands {m,n} into n copies.
const maxItemsLimit = 256

func (c *conv) array(n *node, path string) (string, error) {
	items, lo, hi := n.get("items"), 0, -1
	for _, b := range []struct {
		key string
		dst *int
	}{{"minItems", &lo}, {"maxItems", &hi}} {
		v := n.get(b.key)
		if v == nil {
			continue
		}
		k, err := strconv.Atoi(v.str)
		if v.kind != kNumber || err != nil || k < 0 {
			return "", fmt.Errorf("%w: %s: %s must be a non-negative integer", ErrBadSchema, path, b.key)
		}
		if k > maxItemsLimit {
			return "", fmt.Errorf("%w: %s: %s above %d", ErrUnsupported, path, b.key, maxItemsLimit)
		}
		*b.dst = k
	}
	if hi >= 0 && hi < lo {
		return "", fmt.Errorf("%w: %s: maxItems below minItems", ErrBadSchema, path)
	}
	if items == nil && lo == 0 && hi < 0 {
		return "array", nil
	}
	r := "value"
	if items != nil {
		var err error
		if r, err = c.rule(items, path+"[]"); err != nil {
			return "", err
		}
	}
	if hi == 0 {
		return c.define(`"[" ws "]" ws`), nil
	}
	// the first item, then lo-1 to hi-1 more
	more := fmt.Sprintf("{%d,}", max(lo-1, 0))
	if hi > 0 {
		more = fmt.Sprintf("{%d,%d}", max(lo-1, 0), hi-1)
	}
	body := r + ` ( "," ws ` + r + ` )` + more
	if lo == 0 {
		body = "( " + body + " )?"
	}
	return c.define(`"[" ws ` + body + ` "]" ws`), nil
}

// define writes a new rule with body and returns its name.
func (c *conv) define(body string) string {
	c.n++
	name := "s" + strconv.Itoa(c.n)
	fmt.Fprintf(&c.out, "%s ::= %s\n", name, body)
	return name
}

// literal is the GBNF expression matching exactly the compact JSON text of v,
// followed by whitespace.
func literal(v *node) string {
	return gbnfString(v.json()) + " ws"
}

// gbnfString quotes s as a GBNF string literal: backslash, quote and control
// characters escaped (\xHH), other UTF-8 as is.
func gbnfString(s string) string {
	var b strings.Builder
	b.WriteByte('"')
	for _, r := range s {
		switch {
		case r == '"' || r == '\\':
			b.WriteByte('\\')
			b.WriteRune(r)
		case r < 0x20 || r == 0x7f:
			fmt.Fprintf(&b, `\x%02X`, r)
		default:
			b.WriteRune(r)
		}
	}
	b.WriteByte('"')
	return b.String()
}

// node is a JSON value that keeps object keys in document order.
type node struct {
	kind kind
	keys []string       // kObject
	vals []*node        // kObject, parallel to keys
	idx  map[string]int // kObject: key → index
	arr  []*node        // kArray
	str  string         // kString; kNumber: the literal
	b    bool           // kBool
}

type kind int

const (
	kNull kind = iota
	kBool
	kNumber
	kString
	kArray
	kObject
)

func (n *node) get(k string) *node {
	if i, ok := n.idx[k]; ok && n.kind == kObject {
		return n.vals[i]
	}
	return nil
}

// json is n's compact JSON text.
func (n *node) json() string {
	switch n.kind {
	case kNull:
		return "null"
	case kBool:
		return strconv.FormatBool(n.b)
	case kNumber:
		return n.str
	case kString:
		b, _ := json.Marshal(n.str)
		return string(b)
	case kArray:
		parts := make([]string, len(n.arr))
		for i, e := range n.arr {
			parts[i] = e.json()
		}
		return "[" + strings.Join(parts, ",") + "]"
	default:
		parts := make([]string, len(n.keys))
		for i, k := range n.keys {
			kb, _ := json.Marshal(k)
			parts[i] = string(kb) + ":" + n.vals[i].json()
		}
		return "{" + strings.Join(parts, ",") + "}"
	}
}

// maxDepth bounds schema nesting (a hostile schema cannot exhaust the stack).
const maxDepth = 64

func parse(data []byte) (*node, error) {
	d := json.NewDecoder(bytes.NewReader(data))
	d.UseNumber()
	n, err := parseValue(d, 0)
	if err != nil {
		return nil, err
	}
	if _, err := d.Token(); err != io.EOF {
		return nil, errors.New("trailing data after the schema")
	}
	return n, nil
}

func parseValue(d *json.Decoder, depth int) (*node, error) {
	if depth > maxDepth {
		return nil, fmt.Errorf("nested deeper than %d", maxDepth)
	}
	t, err := d.Token()
	if err != nil {
		return nil, err
	}
	switch v := t.(type) {
	case nil:
		return &node{kind: kNull}, nil
	case bool:
		return &node{kind: kBool, b: v}, nil
	case json.Number:
		return &node{kind: kNumber, str: v.String()}, nil
	case string:
		return &node{kind: kString, str: v}, nil
	case json.Delim:
		if v == '[' {
			n := &node{kind: kArray}
			for d.More() {
				e, err := parseValue(d, depth+1)
				if err != nil {
					return nil, err
				}
				n.arr = append(n.arr, e)
			}
			_, err := d.Token()
			return n, err
		}
		n := &node{kind: kObject, idx: map[string]int{}}
		for d.More() {
			kt, err := d.Token()
			if err != nil {
				return nil, err
			}
			k := kt.(string)
			if _, dup := n.idx[k]; dup {
				return nil, fmt.Errorf("duplicate key %q", k)
			}
			n.idx[k] = len(n.keys)
			e, err := parseValue(d, depth+1)
			if err != nil {
				return nil, err
			}
			n.keys, n.vals = append(n.keys, k), append(n.vals, e)
		}
		_, err := d.Token()
		return n, err
	}
	return nil, fmt.Errorf("unexpected token %v", t)
}
