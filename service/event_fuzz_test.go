package service

import (
	"bytes"
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/adksession/adksession/cache/eventjson"
)

// FuzzEventCodec: an event the codec reads (API or storage form) and
// AppendEvent accepts goes API form -> Event -> API form -> storage form ->
// API form -> Event and comes back the same, but for the normalizations the
// storage form makes by design (docs/persistence.md: nulls in ADK's models
// dropped, bytes in either base64 alphabet, auth schemes answered with
// "type_" too and with the defaults of the model pydantic picks); a second
// round trip keeps every value too, and changes nothing but auth schemes
// whose keys name a field twice; nothing panics.
func FuzzEventCodec(f *testing.F) {
	for _, seed := range []string{
		`{"id":"e1","invocationId":"i1","author":"a","timestamp":1.5,"content":{"role":"model","parts":[{"text":"hé"}]}}`,
		`{"id":"e2","author":"a","timestamp":1735787045.123456,"actions":{"stateDelta":{"user:k":[1,null]},"artifactDelta":{"f.txt":2}},"customMetadata":{"m":{"x":1}}}`,
		`{"id":"e3","author":"a","content":{"parts":[{"functionCall":{"id":"fc","name":"f","args":{"snake_key":1}}}]},"longRunningToolIds":["fc"]}`,
		`{"id":"e4","author":"a","usageMetadata":{"totalTokenCount":3},"actions":{"requestedToolConfirmations":{"fc":{"hint":"h"}},"futureAction":true}}`,
		`{"id":"e5","invocation_id":"i","author":"a","timestamp":1735787045123.456,"actions":{"state_delta":{"k":1}}}`,
		`{"id":"e6","author":"a","branch":"b.c","errorCode":"E","errorMessage":"m","interrupted":true,"turnComplete":true}`,
		`{"id":"e7","author":"a","content":{"parts":[{"inlineData":{"mimeType":"image/png","data":"+/+/"}},{"text":null}]},` +
			`"actions":{"requestedAuthConfigs":{"fc":{"authScheme":{"type":"oauth2","flows":{}}}}}}`,
	} {
		f.Add([]byte(seed))
	}
	s := testService(f, nil)
	f.Fuzz(func(t *testing.T, data []byte) {
		var ev Event
		if json.Unmarshal(data, &ev) != nil || ev.Partial {
			return
		}
		p, err := s.prepareEvent(&ev)
		if err != nil {
			return
		}
		// cached: the form Redis keeps; api: the API form of the same event.
		cached := p.blob
		api, err := json.Marshal(p.stored)
		if err != nil {
			t.Fatalf("API form of %s: %v", cached, err)
		}
		if !reflect.DeepEqual(decodeNumbers(t, cached), withoutEmptyActionMaps(decodeNumbers(t, api))) {
			t.Fatalf("event %s: the form Redis keeps %s is not its API form %s without the empty maps of its actions", data, cached, api)
		}
		// The flusher's conversion of the form Redis keeps.
		_, _, storage, err := eventjson.StorageEvent(cached)
		if err != nil {
			t.Fatalf("storage form of %s: %v", cached, err)
		}
		back, err := eventjson.APIForm(storage)
		if err != nil {
			t.Fatalf("API form of %s: %v", storage, err)
		}
		for _, form := range [][]byte{cached, back} {
			var again Event
			if err := json.Unmarshal(form, &again); err != nil {
				t.Fatalf("read back %s: %v", form, err)
			}
			fillCachedMaps(&again.Actions)
			got, err := json.Marshal(again)
			if err != nil {
				t.Fatalf("write again %s: %v", form, err)
			}
			if path, same := sameEvent("event", decodeNumbers(t, api), decodeNumbers(t, got)); !same {
				t.Fatalf("event %s\nstored as %s\ncame back as %s\n(storage form %s): differs at %s", data, api, got, storage, path)
			}
		}
		storage2, err := eventjson.StorageForm(back)
		if err != nil {
			t.Fatal(err)
		}
		back2, err := eventjson.APIForm(storage2)
		if err != nil {
			t.Fatal(err)
		}
		if path, same := sameEvent("event", decodeNumbers(t, api), decodeNumbers(t, back2)); !same {
			t.Fatalf("event %s\nstored as %s\ncame back twice as %s: differs at %s", data, api, back2, path)
		}
		// Auth schemes aside, a second round trip changes nothing. An auth
		// scheme whose keys name a model's field twice (by alias and by
		// name, with other values: "type" and "type_") is read back by ADK
		// as another model each time (docs/persistence.md); its values are
		// all there (above).
		x, y := withoutAuthSchemes(decodeNumbers(t, back)), withoutAuthSchemes(decodeNumbers(t, back2))
		if !reflect.DeepEqual(x, y) {
			t.Fatalf("a second round trip changed %s into %s", back, back2)
		}
	})
}

// withoutEmptyActionMaps is a decoded event in API form without the maps
// of its actions that the form Redis keeps leaves out when they are empty.
func withoutEmptyActionMaps(ev any) any {
	actions, _ := ev.(map[string]any)["actions"].(map[string]any)
	for _, k := range []string{"artifactDelta", "requestedAuthConfigs", "requestedToolConfirmations"} {
		if m, ok := actions[k].(map[string]any); ok && len(m) == 0 {
			delete(actions, k)
		}
	}
	return ev
}

// withoutAuthSchemes is a decoded event without the auth schemes of its
// requested auth configs.
func withoutAuthSchemes(ev any) any {
	actions, _ := ev.(map[string]any)["actions"].(map[string]any)
	configs, _ := actions["requestedAuthConfigs"].(map[string]any)
	for _, c := range configs {
		if c, ok := c.(map[string]any); ok {
			delete(c, "authScheme")
		}
	}
	return ev
}

func decodeNumbers(t *testing.T, b []byte) any {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		t.Fatalf("%s: %v", b, err)
	}
	return v
}

// sameEvent compares an event as stored with the same event read back, up
// to the storage form's normalizations; it returns where they differ.
func sameEvent(path string, want, got any) (string, bool) {
	switch w := want.(type) {
	case map[string]any:
		g, ok := got.(map[string]any)
		if !ok {
			return path, false
		}
		for k, wv := range w {
			gv, ok := g[k]
			if !ok && wv == nil {
				continue // a null field of a model is dropped (exclude_none)
			}
			if byName, found := g[k+"_"]; found && strings.HasSuffix(path, ".authScheme") {
				// ADK answers an aliased field of an auth scheme by name
				// ("type_", "in_") and, when reading the stored scheme
				// back as another model, "type" with that model's default.
				if _, same := sameEvent(path+"."+k+"_", wv, byName); same {
					continue
				}
			}
			if !ok {
				return path + "." + k + " (missing)", false
			}
			if p, same := sameEvent(path+"."+k, wv, gv); !same {
				return p, false
			}
		}
		for k, gv := range g {
			if _, ok := w[k]; !ok && !schemeDefault(path, k, gv) {
				return path + "." + k + " (added)", false
			}
		}
		return "", true
	case []any:
		g, ok := got.([]any)
		if !ok || len(g) != len(w) {
			return path, false
		}
		for i := range w {
			if p, same := sameEvent(fmt.Sprintf("%s[%d]", path, i), w[i], g[i]); !same {
				return p, false
			}
		}
		return "", true
	case json.Number:
		g, ok := got.(json.Number)
		wf, errW := w.Float64()
		gf, errG := g.Float64()
		return path, ok && (w == g || errW == nil && errG == nil && wf == gf)
	case string:
		g, ok := got.(string)
		return path, ok && (w == g || base64Form(w) == base64Form(g))
	}
	return path, want == got
}

// schemeDefault reports whether key k with value v, found in the object at
// path only after the round trip, is what model_dump adds to an auth scheme
// (docs/persistence.md): "type_" beside "type", "in_" for "in"; the defaults of the model
// pydantic picks (HTTPBearer's "type" and scheme "bearer" for a scheme that
// names neither); an OAuth flow's scopes ({} when not given).
func schemeDefault(path, k string, v any) bool {
	parent := path[strings.LastIndexByte(path, '.')+1:]
	switch {
	case parent == "authScheme":
		switch k {
		case "type_", "type", "in_":
			return true
		case "scheme":
			return v == "bearer"
		}
	case k == "scopes" && strings.Contains(path, ".authScheme.flows."):
		m, ok := v.(map[string]any)
		return ok && len(m) == 0
	}
	return false
}

// base64Form is s in standard base64 without padding (bytes fields are
// read in either alphabet).
func base64Form(s string) string {
	return strings.TrimRight(strings.NewReplacer("-", "+", "_", "/").Replace(s), "=")
}
