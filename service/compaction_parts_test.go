package service

import (
	"encoding/json"
	"reflect"
	"testing"
	"unicode"
)

// TestMayNameCallsFolding: no rune but ASCII's letters folds, as
// encoding/json matches keys, to u, n, c or t: what lets mayNameCalls look
// for "unct" byte by byte.
func TestMayNameCallsFolding(t *testing.T) {
	for r := rune(0x80); r <= unicode.MaxRune; r++ {
		switch unicode.ToUpper(unicode.ToLower(r)) {
		case 'U', 'N', 'C', 'T':
			t.Fatalf("%U folds to an ASCII letter of \"unct\"", r)
		}
	}
}

// contentPartsSlow is contentParts without its scan: always decoded.
func contentPartsSlow(content json.RawMessage) []contentPart {
	var c struct {
		Parts []contentPart `json:"parts"`
	}
	if isNull(content) || json.Unmarshal(content, &c) != nil {
		return nil
	}
	return c.Parts
}

var partsSeeds = []string{
	`{"role":"user","parts":[{"text":"plain text, nothing to see"}]}`,
	`{"role":"model","parts":[{"functionCall":{"id":"c1","name":"f","args":{"a":1}}}]}`,
	`{"role":"user","parts":[{"functionResponse":{"id":"c1","name":"f","response":{}}}]}`,
	`{"parts":[{"FUNCTIONCALL":{"id":"c2","name":"f"}}]}`,
	`{"parts":[{"functıonCall":{"id":"c3","name":"f"}}]}`,          // dotless i: not matched
	`{"parts":[{"functionReſponse":{"id":"c4","name":"f"}}]}`,      // long s folds to S
	`{"parts":[{"\u0066unctionCall":{"id":"c5","name":"f"}}]}`,     // an escape spells it
	`{"PARTS":[{"fUnCtIoNcAlL":{"id":"c6","name":"f"}}]}`,          // any case
	`{"parts":[{"text":"a \"function\" in prose"},{"text":"\n"}]}`, // scanned, decoded, nothing
	`{"parts":[]}`, `null`, `{}`, `{"parts":[{"text":"<b>&amp;</b>"}]}`,
}

// namingParts is the parts that name a call or a response: all that the
// view's callers read of them.
func namingParts(parts []contentPart) []contentPart {
	var out []contentPart
	for _, p := range parts {
		if p.FunctionCall != nil || p.FunctionResponse != nil {
			out = append(out, p)
		}
	}
	return out
}

// FuzzContentParts: contentParts finds what decoding every content would
// find, for any content (its seeds: the spellings encoding/json matches).
func FuzzContentParts(f *testing.F) {
	for _, s := range partsSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		if got, want := namingParts(contentParts(b)), namingParts(contentPartsSlow(b)); !reflect.DeepEqual(got, want) {
			t.Fatalf("contentParts(%s) = %+v, decoding finds %+v", b, got, want)
		}
	})
}

// TestContentPartsScan: each seed gives what decoding it gives, the
// spellings encoding/json matches (any case, the long s, an escape) found
// and the text-only content not decoded at all.
func TestContentPartsScan(t *testing.T) {
	found := 0
	for _, s := range partsSeeds {
		got, want := namingParts(contentParts(json.RawMessage(s))), namingParts(contentPartsSlow(json.RawMessage(s)))
		if !reflect.DeepEqual(got, want) {
			t.Errorf("%s: %+v, decoding finds %+v", s, got, want)
		}
		if len(want) > 0 {
			found++
		}
	}
	if found != 6 {
		t.Errorf("%d seeds name a call or a response, want 6", found)
	}
	if mayNameCalls([]byte(partsSeeds[0])) {
		t.Errorf("a text-only content is scanned as one that may name a call")
	}
}

// mayNameCallsSlow is mayNameCalls checking every byte: the rule itself.
func mayNameCallsSlow(content []byte) bool {
	for i := 0; i+3 < len(content); i++ {
		switch c := content[i]; {
		case c == '\\' && content[i+1] == 'u':
			return true
		case c|0x20 == 'u' && content[i+1]|0x20 == 'n' && content[i+2]|0x20 == 'c' && content[i+3]|0x20 == 't':
			return true
		}
	}
	return false
}

// FuzzMayNameCalls: the scan that jumps from c to c answers what a check
// of every byte answers, at every offset (the first and last ones too).
func FuzzMayNameCalls(f *testing.F) {
	for _, s := range append(partsSeeds, "unct", "UnCt", "xunct", "unc", `\u00`, `x\u0`, `\ux`, "uncT", "cccc", "u\x00ct") {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, content []byte) {
		if got, want := mayNameCalls(content), mayNameCallsSlow(content); got != want {
			t.Fatalf("mayNameCalls(%q) = %v, want %v", content, got, want)
		}
	})
}
