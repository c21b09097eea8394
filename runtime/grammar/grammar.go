package grammar

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
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
	if c.out.Len() > MaxGrammarBytes {
		return "", fmt.Errorf("%w: the grammar exceeds %d bytes", ErrUnsupported, MaxGrammarBytes)
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

// owner maps each supported constraint keyword to the type it constrains.
var owner = map[string]string{"properties": "object", "required": "object", "additionalProperties": "object",
	"items": "array", "minItems": "array", "maxItems": "array",
	"minLength": "string", "maxLength": "string"}

// Limits keep a hostile schema from making a grammar that llama.cpp takes
// seconds to build or to match per token: it keeps one parse stack per
// alternative and prunes duplicates in quadratic time
// (llama_grammar_advance_stack).
const (
	// MaxAlternatives bounds the values of one enum and the branches of
	// one anyOf or oneOf.
	MaxAlternatives = 256
	// MaxGrammarBytes bounds the generated grammar.
	MaxGrammarBytes = 64 << 10
)

// rule writes the rules for schema n and returns the expression that
// matches it (a rule name or a shared rule). Every constraint keyword of n
// is either enforced or refused.
func (c *conv) rule(n *node, path string) (string, error) {
	if c.out.Len() > MaxGrammarBytes {
		return "", fmt.Errorf("%w: the grammar exceeds %d bytes", ErrUnsupported, MaxGrammarBytes)
	}
	if n.kind == kBool {
		if n.b {
			return "value", nil
		}
		return "", fmt.Errorf("%w: %s: schema false matches nothing", ErrUnsupported, path)
	}
	if n.kind != kObject {
		return "", fmt.Errorf("%w: %s: a schema must be an object or a boolean", ErrBadSchema, path)
	}
	var constraints []string // keywords other than annotations and type
	for _, k := range n.keys {
		switch {
		case annotations[k], k == "type":
		case owner[k] != "", k == "enum", k == "const", k == "anyOf", k == "oneOf":
			constraints = append(constraints, k)
		default:
			return "", fmt.Errorf("%w: %s: keyword %q", ErrUnsupported, path, k)
		}
	}
	if v := n.get("additionalProperties"); v != nil && (v.kind != kBool || v.b) {
		return "", fmt.Errorf("%w: %s: additionalProperties other than false", ErrUnsupported, path)
	}
	types, err := typeList(n, path)
	if err != nil {
		return "", err
	}
	// const, enum, anyOf, oneOf: alone (type allowed next to const/enum,
	// where every value must have one of the types)
	for _, k := range []string{"const", "enum", "anyOf", "oneOf"} {
		v := n.get(k)
		if v == nil {
			continue
		}
		for _, o := range constraints {
			if o != k {
				return "", fmt.Errorf("%w: %s: %s next to %s", ErrUnsupported, path, k, o)
			}
		}
		switch k {
		case "const", "enum":
			vals := []*node{v}
			if k == "enum" {
				if v.kind != kArray || len(v.arr) == 0 {
					return "", fmt.Errorf("%w: %s: enum must be a non-empty array", ErrBadSchema, path)
				}
				vals = v.arr
			}
			if len(vals) > MaxAlternatives {
				return "", fmt.Errorf("%w: %s: enum of %d values (at most %d)", ErrUnsupported, path, len(vals), MaxAlternatives)
			}
			alts := make([]string, 0, len(vals))
			for _, e := range vals {
				if types != nil && !hasType(e, types) {
					return "", fmt.Errorf("%w: %s: %s value %s is not of type %s", ErrBadSchema, path, k, e.json(), strings.Join(types, " or "))
				}
				alts = append(alts, literal(e))
			}
			return c.define(strings.Join(alts, " | ")), nil
		default:
			if types != nil {
				return "", fmt.Errorf("%w: %s: %s next to type", ErrUnsupported, path, k)
			}
			if v.kind != kArray || len(v.arr) == 0 {
				return "", fmt.Errorf("%w: %s: %s must be a non-empty array", ErrBadSchema, path, k)
			}
			if len(v.arr) > MaxAlternatives {
				return "", fmt.Errorf("%w: %s: %s of %d branches (at most %d)", ErrUnsupported, path, k, len(v.arr), MaxAlternatives)
			}
			if k == "oneOf" && !disjoint(v.arr) {
				return "", fmt.Errorf("%w: %s: oneOf whose branches may overlap (only branches of distinct types or distinct constants are supported; anyOf is)", ErrUnsupported, path)
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
	// type-owned keywords: without a type they imply it; with one, their
	// type must be among the types
	for _, k := range constraints {
		t := owner[k]
		if types == nil {
			types = []string{t}
		}
		if !slices.Contains(types, t) {
			return "", fmt.Errorf("%w: %s: %s constrains type %s, which the schema does not allow", ErrUnsupported, path, k, t)
		}
	}
	if types == nil {
		return "value", nil
	}
	alts := make([]string, len(types))
	for i, t := range types {
		var err error
		switch t {
		case "string":
			alts[i], err = c.str(n, path)
		case "number", "integer", "boolean", "null":
			alts[i] = t
		case "object":
			alts[i], err = c.object(n, path)
		case "array":
			alts[i], err = c.array(n, path)
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

var knownTypes = []string{"string", "number", "integer", "boolean", "null", "object", "array"}

// typeList returns n's "type" as a list, nil when absent.
func typeList(n *node, path string) ([]string, error) {
	t := n.get("type")
	var types []string
	switch {
	case t == nil:
		return nil, nil
	case t.kind == kString:
		types = []string{t.str}
	case t.kind == kArray && len(t.arr) > 0:
		for _, e := range t.arr {
			if e.kind != kString {
				return nil, fmt.Errorf("%w: %s: type must be a string or an array of strings", ErrBadSchema, path)
			}
			types = append(types, e.str)
		}
	default:
		return nil, fmt.Errorf("%w: %s: type must be a string or an array of strings", ErrBadSchema, path)
	}
	for _, t := range types {
		if !slices.Contains(knownTypes, t) {
			return nil, fmt.Errorf("%w: %s: unknown type %q", ErrBadSchema, path, t)
		}
	}
	return types, nil
}

// hasType reports whether JSON value v is of one of the types.
func hasType(v *node, types []string) bool {
	for _, t := range types {
		switch {
		case t == "null" && v.kind == kNull, t == "boolean" && v.kind == kBool, t == "string" && v.kind == kString,
			t == "array" && v.kind == kArray, t == "object" && v.kind == kObject, t == "number" && v.kind == kNumber:
			return true
		case t == "integer" && v.kind == kNumber:
			if _, err := strconv.ParseInt(v.str, 10, 64); err == nil {
				return true
			}
		}
	}
	return false
}

// disjoint reports whether no JSON value can match two of the oneOf
// branches, as far as this package can tell: every branch has one type and
// the types differ (integer and number overlap), or every branch is a
// const or an enum and no value repeats.
func disjoint(branches []*node) bool {
	seen := map[string]bool{}
	byType := true
	for _, b := range branches {
		t := b.get("type")
		if b.kind != kObject || t == nil || t.kind != kString || b.get("const") != nil || b.get("enum") != nil {
			byType = false
			break
		}
		k := t.str
		if k == "integer" {
			k = "number"
		}
		if seen[k] {
			return false
		}
		seen[k] = true
	}
	if byType {
		return true
	}
	vals := map[string]bool{}
	for _, b := range branches {
		var vs []*node
		if b.kind != kObject {
			return false
		}
		if c := b.get("const"); c != nil {
			vs = []*node{c}
		} else if e := b.get("enum"); e != nil && e.kind == kArray {
			vs = e.arr
		} else {
			return false
		}
		for _, v := range vs {
			if vals[v.json()] {
				return false
			}
			vals[v.json()] = true
		}
	}
	return true
}

func (c *conv) object(n *node, path string) (string, error) {
	props := n.get("properties")
	if props == nil {
		switch {
		case n.get("required") != nil:
			return "", fmt.Errorf("%w: %s: required without properties", ErrUnsupported, path)
		case n.get("additionalProperties") != nil: // false: no property at all
			return c.define(`"{" ws "}" ws`), nil
		}
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
			if r.kind != kString {
				return "", fmt.Errorf("%w: %s: required holds %s, not a property name", ErrBadSchema, path, r.json())
			}
			if props.get(r.str) == nil {
				return "", fmt.Errorf("%w: %s: required names %s, which is not among the properties", ErrUnsupported, path, r.json())
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
		parts[i] = gbnfString(quote(k)) + ` ws ":" ws ` + r
	}
	return c.define(`"{" ws ` + strings.Join(parts, ` "," ws `) + ` "}" ws`), nil
}

// str returns the rule of a string with n's minLength and maxLength, if
// any: char{lo,hi} between the quotes. A bounded string ends a generation
// that a model would otherwise fill with characters until num_predict.
func (c *conv) str(n *node, path string) (string, error) {
	lo, hi, ok, err := bounds(n, path, "minLength", "maxLength", maxLengthLimit)
	if err != nil || !ok {
		return "string", err
	}
	if hi < 0 {
		return c.define(fmt.Sprintf(`"\"" char{%d,} "\"" ws`, lo)), nil
	}
	return c.define(fmt.Sprintf(`"\"" char{%d,%d} "\"" ws`, lo, hi)), nil
}

// maxLengthLimit bounds maxLength: llama.cpp expands {m,n} into n copies.
const maxLengthLimit = 256

// bounds reads n's integer keywords loKey and hiKey (absent: 0 and -1);
// ok is false when both are absent. Each must be a non-negative integer,
// hiKey at most limit and not below loKey.
func bounds(n *node, path, loKey, hiKey string, limit int) (lo, hi int, ok bool, err error) {
	lo, hi = 0, -1
	for _, b := range []struct {
		key string
		dst *int
	}{{loKey, &lo}, {hiKey, &hi}} {
		v := n.get(b.key)
		if v == nil {
			continue
		}
		ok = true
		k, err := strconv.Atoi(v.str)
		if v.kind != kNumber || err != nil || k < 0 {
			return 0, 0, false, fmt.Errorf("%w: %s: %s must be a non-negative integer", ErrBadSchema, path, b.key)
		}
		if k > limit {
			return 0, 0, false, fmt.Errorf("%w: %s: %s above %d", ErrUnsupported, path, b.key, limit)
		}
		*b.dst = k
	}
	if hi >= 0 && hi < lo {
		return 0, 0, false, fmt.Errorf("%w: %s: %s below %s", ErrBadSchema, path, hiKey, loKey)
	}
	return lo, hi, ok, nil
}

// maxItemsLimit bounds maxItems: llama.cpp expands {m,n} into n copies.
const maxItemsLimit = 256

func (c *conv) array(n *node, path string) (string, error) {
	items := n.get("items")
	lo, hi, _, err := bounds(n, path, "minItems", "maxItems", maxItemsLimit)
	if err != nil {
		return "", err
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
		return quote(n.str)
	case kArray:
		parts := make([]string, len(n.arr))
		for i, e := range n.arr {
			parts[i] = e.json()
		}
		return "[" + strings.Join(parts, ",") + "]"
	default:
		parts := make([]string, len(n.keys))
		for i, k := range n.keys {
			parts[i] = quote(k) + ":" + n.vals[i].json()
		}
		return "{" + strings.Join(parts, ",") + "}"
	}
}

// quote is s as a JSON string, without encoding/json's HTML escaping of
// <, > and &, so the output keeps the schema's text.
func quote(s string) string {
	var b bytes.Buffer
	e := json.NewEncoder(&b)
	e.SetEscapeHTML(false)
	_ = e.Encode(s) // a string always encodes
	return strings.TrimSuffix(b.String(), "\n")
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

// OrText returns a grammar that matches what g matches (a grammar from
// FromSchema or JSON: its start rule "root" first) or free text: anything
// whose first character after leading spaces, tabs and newlines is not
// first. It lets a model choose between a structured answer (a tool call
// opening with "[") and prose; the structured branch is fully enforced
// once the model writes first.
func OrText(g string, first rune) (string, error) {
	rest, ok := strings.CutPrefix(g, "root ::= ")
	if !ok {
		return "", fmt.Errorf("%w: OrText needs a grammar whose first rule is root", ErrBadSchema)
	}
	if first <= ' ' || first > '~' {
		return "", fmt.Errorf("%w: OrText's first character must be printable ASCII, got %q", ErrBadSchema, first)
	}
	notFirst := fmt.Sprintf(`[^\x%02X \t\n\r]`, first)
	return "root ::= structured | prose\nprose ::= [ \\t\\n\\r]* " + notFirst + " [^\\x00]*\nstructured ::= " + rest, nil
}
