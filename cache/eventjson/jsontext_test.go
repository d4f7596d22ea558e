package eventjson

import (
	"bytes"
	"encoding/json"
	"testing"
)

// encodingJSON is how encoding/json writes s, with or without its HTML
// escaping.
func encodingJSON(t testing.TB, s string, escapeHTML bool) string {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(escapeHTML)
	if err := enc.Encode(s); err != nil {
		t.Fatal(err)
	}
	return string(bytes.TrimSuffix(b.Bytes(), []byte{'\n'}))
}

var quoteSeeds = []string{"", "plain", `"q" \ /`, "<a href='x'>&amp;</a>", "tab\tnl\nnul\x00\x1f\x7f",
	"héllo ☃ 𝄞", "\u2028\u2029", "bad \xff\xfe utf8 \xc3", "{x}:y", "\u00e9\u0301"}

// FuzzAppendString: the module's one quoter writes every string exactly as
// encoding/json does, in both modes (json.Marshal's, and an Encoder's with
// SetEscapeHTML(false), which is also Python's json.dumps for these).
func FuzzAppendString(f *testing.F) {
	for _, s := range quoteSeeds {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		for _, html := range []bool{true, false} {
			if got, want := string(AppendString([]byte("x"), s, html)), "x"+encodingJSON(t, s, html); got != want {
				t.Fatalf("AppendString(%q, html %v) = %s, want %s", s, html, got, want)
			}
		}
	})
}

func TestPathKey(t *testing.T) {
	for k, want := range map[string]string{"a": ".a", "_a1": "._a1", "A_b": ".A_b", "1a": `["1a"]`, "": `[""]`,
		"a-b": `["a-b"]`, "a.b": `["a.b"]`, "é": `["é"]`, `"`: `["\""]`} {
		if got := PathKey(k); got != want {
			t.Errorf("PathKey(%q) = %s, want %s", k, got, want)
		}
	}
}

func TestAppendSeconds(t *testing.T) {
	for us, want := range map[int64]string{0: "0.000000", 1: "0.000001", 1_700_000_000_000_123: "1700000000.000123",
		7_258_118_399_999_999: "7258118399.999999", -1_500_000: "-1.500000", -1: "-0.000001"} {
		if got := string(AppendSeconds(nil, us)); got != want {
			t.Errorf("AppendSeconds(%d) = %s, want %s", us, got, want)
		}
	}
}
