package grammar

import (
	"errors"
	"fmt"
	"strings"
	"testing"
)

func TestFromSchemaRules(t *testing.T) {
	g, err := FromSchema([]byte(`{"title":"Pet","type":"object","additionalProperties":false,
		"properties":{"name":{"type":"string","description":"d"},"kind":{"enum":["cat","dog \"x\"",3,null]},
		"tags":{"type":"array","items":{"type":"integer"},"minItems":1,"maxItems":3},"owner":{"type":["string","null"]},
		"any":{},"either":{"anyOf":[{"type":"number"},{"const":{"a":[true]}}]}},"required":["kind","name"]}`))
	if err != nil {
		t.Fatal(err)
	}
	want := `root ::= ws s6
s1 ::= "\"cat\"" ws | "\"dog \\\"x\\\"\"" ws | "3" ws | "null" ws
s2 ::= "[" ws integer ( "," ws integer ){0,2} "]" ws
s3 ::= string | null
s4 ::= "{\"a\":[true]}" ws
s5 ::= number | s4
s6 ::= "{" ws "\"name\"" ws ":" ws string "," ws "\"kind\"" ws ":" ws s1 "," ws "\"tags\"" ws ":" ws s2 "," ws "\"owner\"" ws ":" ws s3 "," ws "\"any\"" ws ":" ws value "," ws "\"either\"" ws ":" ws s5 "}" ws
` + common
	if g != want {
		t.Fatalf("grammar:\n%s\nwant:\n%s", g, want)
	}
}

func TestFromSchemaArrays(t *testing.T) {
	for schema, rule := range map[string]string{
		`{"type":"array"}`:                               "root ::= ws array\n",
		`{"type":"array","maxItems":0}`:                  `s1 ::= "[" ws "]" ws`,
		`{"items":{"type":"boolean"}}`:                   `s1 ::= "[" ws ( boolean ( "," ws boolean ){0,} )? "]" ws`,
		`{"type":"array","minItems":2}`:                  `s1 ::= "[" ws value ( "," ws value ){1,} "]" ws`,
		`{"type":"array","minItems":0,"maxItems":1}`:     `s1 ::= "[" ws ( value ( "," ws value ){0,0} )? "]" ws`,
		`{"type":"object"}`:                              "root ::= ws object\n",
		`{"type":"object","properties":{}}`:              `s1 ::= "{" ws "}" ws`,
		`true`:                                           "root ::= ws value\n",
		`{"const":"\u00e9\n"}`:                           `s1 ::= "\"é\\n\"" ws`,
		`{"oneOf":[{"type":"string"},{"type":"null"}]}`:  `s1 ::= string | null`,
		`{"oneOf":[{"const":1},{"enum":[2,"<&>"]}]}`:     `s2 ::= "2" ws | "\"<&>\"" ws`,
		`{"minItems":2}`:                                 `s1 ::= "[" ws value ( "," ws value ){1,} "]" ws`,
		`{"type":"object","additionalProperties":false}`: `s1 ::= "{" ws "}" ws`,
		`{"type":["integer","string"],"enum":[1,"a"]}`:   `s1 ::= "1" ws | "\"a\"" ws`,
		`{"type":"string","maxLength":8}`:                `s1 ::= "\"" char{0,8} "\"" ws`,
		`{"type":"string","minLength":2,"maxLength":3}`:  `s1 ::= "\"" char{2,3} "\"" ws`,
		`{"minLength":1}`:                                `s1 ::= "\"" char{1,} "\"" ws`,
		`{"type":["string","null"],"maxLength":2}`:       `s2 ::= s1 | null`,
	} {
		g, err := FromSchema([]byte(schema))
		if err != nil {
			t.Errorf("%s: %v", schema, err)
			continue
		}
		if !strings.Contains(g, rule) {
			t.Errorf("%s: no %q in\n%s", schema, rule, g)
		}
	}
}

func TestFromSchemaRefused(t *testing.T) {
	deep := strings.Repeat(`{"items":`, 100) + `{}` + strings.Repeat(`}`, 100)
	var props []string
	for i := 0; i < 2000; i++ {
		props = append(props, fmt.Sprintf(`"property_with_a_long_name_%04d":{"type":"string"}`, i))
	}
	bigObject := `{"type":"object","properties":{` + strings.Join(props, ",") + `}}`
	for schema, want := range map[string]error{
		`{"type":"string","pattern":"^a"}`:                         ErrUnsupported,
		`{"$ref":"#/$defs/x"}`:                                     ErrUnsupported,
		`{"type":"object","additionalProperties":true}`:            ErrUnsupported,
		`{"type":"object","properties":{"a":{}},"required":["b"]}`: ErrUnsupported,
		`{"type":"array","maxItems":100000}`:                       ErrUnsupported,
		`false`:                                                    ErrUnsupported,
		`{"type":"array","minItems":3,"maxItems":2}`:               ErrBadSchema,
		`{"type":"array","minItems":-1}`:                           ErrBadSchema,
		`{"type":"array","minItems":1.5}`:                          ErrBadSchema,
		`{"type":"string","maxLength":1000}`:                       ErrUnsupported,
		`{"type":"string","minLength":3,"maxLength":2}`:            ErrBadSchema,
		`{"type":"number","maxLength":2}`:                          ErrUnsupported,
		`{"type":"thing"}`:                                         ErrBadSchema,
		`{"type":7}`:                                               ErrBadSchema,
		`{"enum":[]}`:                                              ErrBadSchema,
		`{"anyOf":{}}`:                                             ErrBadSchema,
		`{"type":"object","properties":{"a":{},"a":{}}}`:           ErrBadSchema,
		`{"type":"object","properties":[]}`:                        ErrBadSchema,
		`"string"`:                                                 ErrBadSchema,
		`{"type":"string"} {}`:                                     ErrBadSchema,
		`{"type":`:                                                 ErrBadSchema,
		``:                                                         ErrBadSchema,
		deep:                                                       ErrBadSchema,
		`{"anyOf":[{"type":"string"}],"type":"string"}`:            ErrUnsupported,
		`{"type":"object","properties":{"x":{"type":"string","pattern":"a"}}}`:   ErrUnsupported,
		`{"type":"object","properties":{"x":{"items":{"uniqueItems":true}}}}`:    ErrUnsupported,
		`{"type":"object","properties":{"x":{"type":["string",{"a":1}]}}}`:       ErrBadSchema,
		`{"type":"object","properties":{"x":{"type":"number","minimum":0}}}`:     ErrUnsupported,
		`{"type":"object","properties":{"x":{"not":{}}}}`:                        ErrUnsupported,
		`{"type":"object","required":"x","properties":{"x":{}}}`:                 ErrBadSchema,
		`{"type":"object","properties":{"x":{"allOf":[{"type":"string"}]}}}`:     ErrUnsupported,
		`{"type":"object","properties":{"x":{"if":{},"then":{}}}}`:               ErrUnsupported,
		`{"type":"object","properties":{"x":{"type":"array","prefixItems":[]}}}`: ErrUnsupported,
		`{"type":"object","required":["name"]}`:                                  ErrUnsupported,
		`{"required":["a"]}`:                                                     ErrUnsupported,
		`{"anyOf":[{"type":"array"}],"maxItems":1}`:                              ErrUnsupported,
		`{"enum":[1],"minItems":1}`:                                              ErrUnsupported,
		`{"type":"string","enum":["a",1]}`:                                       ErrBadSchema,
		`{"type":"integer","const":1.5}`:                                         ErrBadSchema,
		`{"oneOf":[{"type":"integer"},{"type":"number"}]}`:                       ErrUnsupported,
		`{"oneOf":[{"const":1},{"enum":[1,3]}]}`:                                 ErrUnsupported,
		`{"oneOf":[{"type":"string"},{"type":"string","enum":["a"]}]}`:           ErrUnsupported,
		`{"type":"string","items":{}}`:                                           ErrUnsupported,
		`{"type":"object","required":[1],"properties":{}}`:                       ErrBadSchema,
		`{"enum":[` + strings.Repeat(`1,`, 256) + `1]}`:                          ErrUnsupported,
		`{"anyOf":[` + strings.Repeat(`{},`, 256) + `{}]}`:                       ErrUnsupported,
		bigObject: ErrUnsupported,
	} {
		_, err := FromSchema([]byte(schema))
		if !errors.Is(err, want) {
			t.Errorf("%.60s: got %v, want %v", schema, err, want)
		}
	}
	_, err := FromSchema([]byte(`{"type":"object","properties":{"a":{}},"required":["b"]}`))
	if err == nil || !strings.Contains(err.Error(), `required names "b"`) {
		t.Fatalf("error %v", err)
	}
	// the error names the place and the keyword
	_, err = FromSchema([]byte(`{"type":"object","properties":{"x":{"type":"string","pattern":"a"}}}`))
	if err == nil || !strings.Contains(err.Error(), `$.x`) || !strings.Contains(err.Error(), `"pattern"`) {
		t.Fatalf("error %v", err)
	}
}

// FuzzFromSchema: any input either converts or fails with one of the two
// errors; never a panic.
func FuzzFromSchema(f *testing.F) {
	for _, s := range []string{`{"type":"object","properties":{"a":{"enum":[1,"x"]}}}`, `{"items":{"anyOf":[{},true]},"maxItems":3}`, `true`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		g, err := FromSchema(b)
		if err != nil {
			if !errors.Is(err, ErrBadSchema) && !errors.Is(err, ErrUnsupported) {
				t.Fatalf("error %v wraps neither", err)
			}
			return
		}
		if !strings.HasPrefix(g, "root ::= ws ") || !strings.HasSuffix(g, common) {
			t.Fatalf("grammar %q", g)
		}
	})
}
