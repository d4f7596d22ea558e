package eventjson

import (
	"bytes"
	"encoding/base64"
	"math/rand/v2"
	"strings"
	"testing"
)

func TestCheckAPIKeys(t *testing.T) {
	for api, want := range map[string]string{
		`{"id":"e","content":{"role":"model","parts":[{"text":"x","functionCall":{"name":"f","args":{"snake_key":{"Any_Key":1}}}}]}}`:    "",
		`{"actions":{"stateDelta":{"my_key":{"X_y":1}},"requestedAuthConfigs":{"fc_1":{"authScheme":{"type_":"oauth2"},"my_extra":1}}}}`: "",
		`{"customMetadata":{"a_b":1},"futureField":{"x_y":1},"actions":{"future_action":1}}`:                                             "",
		`{"id":"e","future_field":1}`:                                                                      ".future_field",
		`{"content":{"parts":[{"text":"x","my_key":1}]}}`:                                                  ".content.parts[0].my_key",
		`{"content":{"parts":[{},{"Text":"x"}]}}`:                                                          ".content.parts[1].Text",
		`{"content":{"parts":[{"function_call":{"name":"f"}}]}}`:                                           ".content.parts[0].function_call",
		`{"usageMetadata":{"prompt_token_count":1}}`:                                                       ".usageMetadata.prompt_token_count",
		`{"content":{"parts":[{"functionCall":{"":"0","":{}}}]}}`:                                          `.content.parts[0].functionCall[""]`,
		`{"turn_complete":true}`:                                                                           ".turn_complete",
		`{"actions":{"requestedAuthConfigs":{"fc 1":{"rawAuthCredential":{"oauth2":{"client_id":"c"}}}}}}`: `.actions.requestedAuthConfigs["fc 1"].rawAuthCredential.oauth2.client_id`,
		// Twice in one object: among few members, among many, escaped.
		`{"content":{"parts":[{"text":"x","thought":true,"text":"y"}]}}`:                                                                                                 ".content.parts[0].text",
		`{"content":{"parts":[{"text":"x","thought":true,"\u0074ext":"y"}]}}`:                                                                                            ".content.parts[0].text",
		`{"id":"e","author":"a","branch":"b","timestamp":1,"partial":true,"turnComplete":true,"interrupted":true,"errorCode":"c","errorMessage":"m","author":"b"}`:       ".author",
		`{"id":"e","author":"a","branch":"b","timestamp":1,"partial":true,"turnComplete":true,"interrupted":true,"errorCode":"c","errorMessage":"m","invocationId":"i"}`: "",
	} {
		path, problem := CheckAPI([]byte(api))
		if (problem == "") != (want == "") || path != want || problem != "" && problem != keyProblem {
			t.Errorf("CheckAPI(%s) = %q, %q; want %q", api, path, problem, want)
		}
	}
}

// TestCheckAPIShapes: a value of one of ADK's models is an object, a list
// of them a list of objects, a map of them an object of objects, each null
// for none: ADK Python refuses another (pydantic), and Postgres's call-id
// indexes read a part as an object.
func TestCheckAPIShapes(t *testing.T) {
	for api, want := range map[string]string{
		`{"content":null,"groundingMetadata":null,"actions":{"compaction":null,"requestedAuthConfigs":null}}`: "",
		`{"content":{"parts":null}}`:                                         "",
		`{"content":{"parts":[]},"actions":{"requestedAuthConfigs":{}}}`:     "",
		`{"content":"x"}`:                                                    ".content",
		`{"content":[{"parts":[]}]}`:                                         ".content",
		`{"content":{"parts":[{"functionCall":{"id":"a","name":"f"}},"x"]}}`: ".content.parts[1]",
		`{"content":{"parts":[{"text":"a"},null]}}`:                          ".content.parts[1]",
		`{"content":{"parts":[7]}}`:                                          ".content.parts[0]",
		`{"content":{"parts":[[{"text":"a"}]]}}`:                             ".content.parts[0]",
		`{"content":{"parts":{"text":"a"}}}`:                                 ".content.parts",
		`{"content":{"parts":"a"}}`:                                          ".content.parts",
		`{"content":{"parts":[{"functionCall":true}]}}`:                      ".content.parts[0].functionCall",
		`{"content":{"parts":[{"functionResponse":{"parts":[1]}}]}}`:         ".content.parts[0].functionResponse.parts[0]",
		`{"actions":{"compaction":{"compactedContent":"c"}}}`:                ".actions.compaction.compactedContent",
		`{"actions":{"requestedAuthConfigs":[]}}`:                            ".actions.requestedAuthConfigs",
		`{"actions":{"requestedToolConfirmations":{"fc":"yes"}}}`:            `.actions.requestedToolConfirmations["fc"]`,
		`{"groundingMetadata":{"groundingChunks":[{"web":{}}, 1]}}`:          ".groundingMetadata.groundingChunks[1]",
	} {
		path, problem := CheckAPI([]byte(api))
		if (problem == "") != (want == "") || path != want || problem != "" && problem != shapeProblem && problem != listProblem {
			t.Errorf("CheckAPI(%s) = %q, %q; want %q", api, path, problem, want)
		}
	}
}

// keptByRename's shortcut agrees with the conversion it stands for.
func TestKeptByRename(t *testing.T) {
	keys := []string{"", "a", "aB", "aBC", "a1B", "x2d", "x2D", "_a", "a_", "a_b", "A", "Ab", "ABC", "0_", "a-b", "é", "functionCall", "mimeType", "tokenId", "a1b2", "aB1c"}
	const alphabet = "aAbB0_9zZ-"
	for range 20000 {
		k := make([]byte, rand.IntN(6))
		for i := range k {
			k[i] = alphabet[rand.IntN(len(alphabet))]
		}
		keys = append(keys, string(k))
	}
	for _, k := range keys {
		if alreadyCamel(k) && camel(snake(k)) != k {
			t.Fatalf("%q is already camelCase but comes back as %q", k, camel(snake(k)))
		}
	}
}

// TestBytesProblem: the base64 every reader decodes alike. The table was
// checked against pydantic 2.13 (val_json_bytes="base64", ADK Python's
// genai models); each value taken decodes, after rebase64, with Go's
// strict decoders of both alphabets to the same bytes.
func TestBytesProblem(t *testing.T) {
	for v, want := range map[string][]byte{
		`null`: nil, `""`: {}, `"AAEC"`: {0, 1, 2}, `"AAE"`: {0, 1}, `"AAE="`: {0, 1}, `"AA=="`: {0}, `"AA="`: {0}, `"AA"`: {0},
		`"-_-_"`: {0xfb, 0xff, 0xbf}, `"+/+/"`: {0xfb, 0xff, 0xbf}, `"_w"`: {0xff}, `"_w=="`: {0xff}, `"/w"`: {0xff},
		`"\u0041AAA"`: {0, 0, 0}, `"AAAAAA"`: {0, 0, 0, 0}, `"aGk\/"`: {0x68, 0x69, 0x3f},
	} {
		if p := bytesProblem([]byte(v)); p != "" {
			t.Errorf("bytesProblem(%s) = %q, want none", v, p)
			continue
		}
		if v == "null" {
			continue
		}
		std, err := base64.StdEncoding.Strict().DecodeString(unquote(rebase64([]byte(v), standard)))
		if err != nil || !bytes.Equal(std, want) {
			t.Errorf("%s: standard %q, %v; want %x", v, std, err, want)
		}
		url, err := base64.URLEncoding.Strict().DecodeString(unquote(rebase64([]byte(v), urlSafe)))
		if err != nil || !bytes.Equal(url, want) {
			t.Errorf("%s: URL-safe %q, %v; want %x", v, url, err, want)
		}
	}
	for v, want := range map[string]string{
		`"!!!notbase64"`: `not base64: '!' at offset 0`,
		`"%%%"`:          `not base64: '%' at offset 0`,
		`"A-_/"`:         "mixes the standard",
		`"+_"`:           "mixes the standard",
		`"AB=="`:         "sets bits after the last byte",
		`"AB"`:           "sets bits after the last byte",
		`"AAF"`:          "sets bits after the last byte",
		`"+/"`:           "sets bits after the last byte",
		`"A"`:            "not base64: 1 characters",
		`"AAAAA"`:        "not base64: 5 characters",
		`"AAAA="`:        "1 '=' after 4 characters",
		`"AAA=="`:        "2 '=' after 3 characters",
		`"AA==="`:        "3 '=' after 2 characters",
		`"="`:            "1 '=' after 0 characters",
		`"AA=A"`:         `'=' at offset 2`,
		`"AA\nAA"`:       `'\n' at offset 2`,
		`" AAAA"`:        `' ' at offset 0`,
		`"AAAA\u0000"`:   `'\x00' at offset 4`,
		`5`:              "a bytes field is a string of base64",
		`{"data":"AA"}`:  "a bytes field is a string of base64",
	} {
		if p := bytesProblem([]byte(v)); !strings.Contains(p, want) {
			t.Errorf("bytesProblem(%s) = %q, want %q", v, p, want)
		}
	}
}

// TestCheckAPIBytes: CheckAPI finds bad base64 in every bytes field of an
// event, with its path.
func TestCheckAPIBytes(t *testing.T) {
	const bad = `"!!!notbase64"`
	for api, want := range map[string]string{
		`{"content":{"parts":[{"inlineData":{"mimeType":"image/png","data":` + bad + `}}]}}`:                                     ".content.parts[0].inlineData.data",
		`{"content":{"parts":[{"text":"x"},{"text":"y","thoughtSignature":` + bad + `}]}}`:                                       ".content.parts[1].thoughtSignature",
		`{"content":{"parts":[{"functionResponse":{"name":"f","parts":[{"inlineData":{"data":` + bad + `}}]}}]}}`:                ".content.parts[0].functionResponse.parts[0].inlineData.data",
		`{"actions":{"compaction":{"compactedContent":{"parts":[{"thoughtSignature":` + bad + `}]}}}}`:                           ".actions.compaction.compactedContent.parts[0].thoughtSignature",
		`{"groundingMetadata":{"searchEntryPoint":{"renderedContent":"x","sdkBlob":` + bad + `}}}`:                               ".groundingMetadata.searchEntryPoint.sdkBlob",
		`{"content":{"parts":[{"inlineData":{"data":"AAEC"},"thoughtSignature":"-_-_"}]},"customMetadata":{"data":` + bad + `}}`: "",
		`{"content":{"parts":[{"functionCall":{"name":"f","args":{"data":` + bad + `,"thoughtSignature":5}}}]}}`:                 "",
	} {
		path, problem := CheckAPI([]byte(api))
		if path != want || (problem == "") != (want == "") || want != "" && !strings.Contains(problem, "not base64") {
			t.Errorf("CheckAPI(%s) = %q, %q; want %q", api, path, problem, want)
		}
	}
}
