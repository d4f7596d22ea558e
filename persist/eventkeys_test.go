package persist

import (
	"math/rand/v2"
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
		path, ok := CheckAPIKeys([]byte(api))
		if ok != (want == "") || path != want {
			t.Errorf("CheckAPIKeys(%s) = %q, %v; want %q", api, path, ok, want)
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
