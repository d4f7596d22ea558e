package eventjson

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestEventForms converts events of every shape ADK writes from API form to
// storage form and back: the storage form is what ADK Python's model_dump
// writes, and the round trip gives the event back.
func TestEventForms(t *testing.T) {
	cases := []struct {
		name, api, storage string
		// answer is APIForm(storage) when it is not api: ADK answers its
		// OpenAPI auth schemes with their "type_" (TestEventFormsAuthSchemeUnion).
		answer string
	}{{
		name:    "part metadata keeps the application's keys",
		api:     `{"content":{"role":"model","parts":[{"text":"x","partMetadata":{"sourceDoc":"d1","page_no":3,"Mixed_Key":{"aB":1}}}]}}`,
		storage: `{"content":{"role":"model","parts":[{"text":"x","part_metadata":{"sourceDoc":"d1","page_no":3,"Mixed_Key":{"aB":1}}}]}}`,
	}, {
		name: "function call args and response keep their keys",
		api: `{"content":{"parts":[{"functionCall":{"id":"c","name":"f","args":{"city_name":"P","unitSystem":{"tempUnit":"C"}}}},` +
			`{"functionResponse":{"id":"c","name":"f","response":{"tempC":1,"wind_kph":[3]},"willContinue":false}}]}}`,
		storage: `{"content":{"parts":[{"function_call":{"id":"c","name":"f","args":{"city_name":"P","unitSystem":{"tempUnit":"C"}}}},` +
			`{"function_response":{"id":"c","name":"f","response":{"tempC":1,"wind_kph":[3]},"will_continue":false}}]}}`,
	}, {
		name: "OAuth2 scheme: OpenAPI field names, scopes and headers as given",
		api: `{"actions":{"requestedAuthConfigs":{"fc-3":{"authScheme":{"type":"oauth2","flows":{"authorizationCode":` +
			`{"authorizationUrl":"https://a","tokenUrl":"https://t","refreshUrl":"https://r","scopes":{"User.Read":"p","read_write":"rw"}},` +
			`"clientCredentials":{"tokenUrl":"https://t","scopes":{}}}},` +
			`"rawAuthCredential":{"authType":"oauth2","oauth2":{"clientId":"cid","tokenEndpointAuthMethod":"client_secret_basic"}},` +
			`"credentialKey":"k"}}}}`,
		storage: `{"actions":{"requested_auth_configs":{"fc-3":{"auth_scheme":{"type_":"oauth2","flows":{"authorizationCode":` +
			`{"authorizationUrl":"https://a","tokenUrl":"https://t","refreshUrl":"https://r","scopes":{"User.Read":"p","read_write":"rw"}},` +
			`"clientCredentials":{"tokenUrl":"https://t","scopes":{}}}},` +
			`"raw_auth_credential":{"auth_type":"oauth2","oauth2":{"client_id":"cid","token_endpoint_auth_method":"client_secret_basic"}},` +
			`"credential_key":"k"}}}}`,
		answer: `{"actions":{"requestedAuthConfigs":{"fc-3":{"authScheme":{"type":"oauth2","type_":"oauth2","flows":{"authorizationCode":` +
			`{"authorizationUrl":"https://a","tokenUrl":"https://t","refreshUrl":"https://r","scopes":{"User.Read":"p","read_write":"rw"}},` +
			`"clientCredentials":{"tokenUrl":"https://t","scopes":{}}}},` +
			`"rawAuthCredential":{"authType":"oauth2","oauth2":{"clientId":"cid","tokenEndpointAuthMethod":"client_secret_basic"}},` +
			`"credentialKey":"k"}}}}`,
	}, {
		name: "HTTP bearer and OpenID Connect schemes, additional headers as given",
		api: `{"actions":{"requestedAuthConfigs":{"fc-5":{"authScheme":{"type":"http","scheme":"bearer","bearerFormat":"JWT"},` +
			`"rawAuthCredential":{"authType":"http","http":{"scheme":"bearer","credentials":{"token":"tok"},` +
			`"additionalHeaders":{"X-Goog-User-Project":"p1","x_tenant_id":"t1"}}}},` +
			`"fc-6":{"authScheme":{"type":"openIdConnect","openIdConnectUrl":"https://o/.well-known"}}}}}`,
		storage: `{"actions":{"requested_auth_configs":{"fc-5":{"auth_scheme":{"type_":"http","scheme":"bearer","bearerFormat":"JWT"},` +
			`"raw_auth_credential":{"auth_type":"http","http":{"scheme":"bearer","credentials":{"token":"tok"},` +
			`"additional_headers":{"X-Goog-User-Project":"p1","x_tenant_id":"t1"}}}},` +
			`"fc-6":{"auth_scheme":{"type_":"openIdConnect","openIdConnectUrl":"https://o/.well-known"}}}}}`,
		answer: `{"actions":{"requestedAuthConfigs":{"fc-5":{"authScheme":{"type":"http","type_":"http","scheme":"bearer","bearerFormat":"JWT"},` +
			`"rawAuthCredential":{"authType":"http","http":{"scheme":"bearer","credentials":{"token":"tok"},` +
			`"additionalHeaders":{"X-Goog-User-Project":"p1","x_tenant_id":"t1"}}}},` +
			`"fc-6":{"authScheme":{"type":"openIdConnect","type_":"openIdConnect","openIdConnectUrl":"https://o/.well-known"}}}}}`,
	}, {
		name: "service account credential: type_ is aliased type",
		api: `{"actions":{"requestedAuthConfigs":{"fc":{"authScheme":{"type":"custom_sa"},"rawAuthCredential":{"authType":"serviceAccount",` +
			`"serviceAccount":{"scopes":["s"],"serviceAccountCredential":{"type":"service_account","projectId":"p","clientX509CertUrl":"u"}}}}}}}`,
		storage: `{"actions":{"requested_auth_configs":{"fc":{"auth_scheme":{"type_":"custom_sa"},"raw_auth_credential":{"auth_type":"serviceAccount",` +
			`"service_account":{"scopes":["s"],"service_account_credential":{"type_":"service_account","project_id":"p","client_x509_cert_url":"u"}}}}}}}`,
	}, {
		name:    "cache metadata is a model without aliases",
		api:     `{"cacheMetadata":{"cache_name":"c","expire_time":1.5,"fingerprint":"fp","invocations_used":2,"contents_count":4}}`,
		storage: `{"cache_metadata":{"cache_name":"c","expire_time":1.5,"fingerprint":"fp","invocations_used":2,"contents_count":4}}`,
	}, {
		name: "ADK 2.x fields at top level, nothing invented",
		api: `{"nodeInfo":{"path":"wf@1/A@1","outputFor":["wf@1"],"messageAsOutput":true},"output":{"resultKey":{"inner_key":1}},` +
			`"isolationScope":"fc-1","environmentId":"env-1","interactionId":"i-1","voiceActivity":{"voiceActivityType":"ACTIVITY_START"},` +
			`"turnCompleteReason":"NEED_MORE_INPUT"}`,
		storage: `{"node_info":{"path":"wf@1/A@1","output_for":["wf@1"],"message_as_output":true},"output":{"resultKey":{"inner_key":1}},` +
			`"isolation_scope":"fc-1","environment_id":"env-1","interaction_id":"i-1","voice_activity":{"voice_activity_type":"ACTIVITY_START"},` +
			`"turn_complete_reason":"NEED_MORE_INPUT"}`,
	}, {
		name: "workflow actions: route, widgets, model response, agent state",
		api: `{"actions":{"route":["approve",2],"renderUiWidgets":[{"id":"w","provider":"mcp","payload":{"resourceUri":"u","tool_args":{}}}],` +
			`"setModelResponse":{"finalAnswer":42},"agentState":{"stepIndex":3,"sub_state":null},"endOfAgent":true,` +
			`"compaction":{"startTimestamp":1.5,"endTimestamp":2.5,"compactedContent":{"parts":[{"text":"s"}],"role":"model"}}}}`,
		storage: `{"actions":{"route":["approve",2],"render_ui_widgets":[{"id":"w","provider":"mcp","payload":{"resourceUri":"u","tool_args":{}}}],` +
			`"set_model_response":{"finalAnswer":42},"agent_state":{"stepIndex":3,"sub_state":null},"end_of_agent":true,` +
			`"compaction":{"start_timestamp":1.5,"end_timestamp":2.5,"compacted_content":{"parts":[{"text":"s"}],"role":"model"}}}}`,
	}, {
		name:    "state delta keeps prefixes, odd keys and nulls",
		api:     `{"actions":{"stateDelta":{"app:x":null,"user:camelKey":{"snake_key":1},"a<b>&c":"é","x.y":[]},"artifactDelta":{"my_file.txt":2}}}`,
		storage: `{"actions":{"state_delta":{"app:x":null,"user:camelKey":{"snake_key":1},"a<b>&c":"é","x.y":[]},"artifact_delta":{"my_file.txt":2}}}`,
	}, {
		name: "genai metadata models",
		api: `{"usageMetadata":{"promptTokenCount":1,"promptTokensDetails":[{"modality":"TEXT","tokenCount":1}]},` +
			`"groundingMetadata":{"groundingChunks":[{"web":{"uri":"u"}}],"searchEntryPoint":{"renderedContent":"<div>","sdkBlob":"AA-_"}},` +
			`"logprobsResult":{"topCandidates":[{"candidates":[{"logProbability":-0.1,"tokenId":5}]}]},` +
			`"liveSessionResumptionUpdate":{"newHandle":"h"},"goAway":{"timeLeft":"5s"},"inputTranscription":{"text":"t","finished":true}}`,
		storage: `{"usage_metadata":{"prompt_token_count":1,"prompt_tokens_details":[{"modality":"TEXT","token_count":1}]},` +
			`"grounding_metadata":{"grounding_chunks":[{"web":{"uri":"u"}}],"search_entry_point":{"rendered_content":"<div>","sdk_blob":"AA-_"}},` +
			`"logprobs_result":{"top_candidates":[{"candidates":[{"log_probability":-0.1,"token_id":5}]}]},` +
			`"live_session_resumption_update":{"new_handle":"h"},"go_away":{"time_left":"5s"},"input_transcription":{"text":"t","finished":true}}`,
	}, {
		name: "ADK JS's CompactedEvent fields at the top level, as ADK JS writes them",
		api: `{"author":"system","isCompacted":true,"startTime":1735787045001,"endTime":1735787046002.5,` +
			`"compactedContent":"the summary","isScratchpad":true,"content":{"role":"model","parts":[{"text":"the summary"}]}}`,
		storage: `{"author":"system","is_compacted":true,"start_time":1735787045001,"end_time":1735787046002.5,` +
			`"compacted_content":"the summary","is_scratchpad":true,"content":{"role":"model","parts":[{"text":"the summary"}]}}`,
	}, {
		name: "top-level fields ADK Python does not know stay at the top level, values as given",
		api: `{"author":"a","customMetadata":{"my_key":1},"routes":["x"],"requestedInput":{"interruptId":"i","a_b":1},` +
			`"route":"next","ID":1,"x2D":true,"actions":{"futureAction":{"a_b":1}}}`,
		storage: `{"author":"a","custom_metadata":{"my_key":1,"adksession:actions":{"futureAction":{"a_b":1}}},"actions":{},` +
			`"routes":["x"],"requested_input":{"interruptId":"i","a_b":1},"route":"next","_i_d":1,"x2_d":true}`,
	}, {
		name:    "unknown actions alone travel in custom_metadata",
		api:     `{"author":"a","actions":{"futureAction":true}}`,
		storage: `{"author":"a","actions":{},"custom_metadata":{"adksession:actions":{"futureAction":true}}}`,
	}, {
		name:    "an empty custom metadata stays empty next to unknown actions",
		api:     `{"author":"a","customMetadata":{},"routes":["x"],"actions":{"futureAction":true}}`,
		storage: `{"author":"a","routes":["x"],"actions":{},"custom_metadata":{"adksession:empty":true,"adksession:actions":{"futureAction":true}}}`,
	}, {
		name:    "an empty custom metadata next to unknown top-level fields",
		api:     `{"author":"a","customMetadata":{},"isCompacted":true}`,
		storage: `{"author":"a","custom_metadata":{},"is_compacted":true}`,
	}}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			st, err := StorageForm([]byte(c.api))
			require.NoError(t, err)
			sameJSON(t, "storage form", st, []byte(c.storage))
			api, err := APIForm([]byte(c.storage))
			require.NoError(t, err)
			want := c.api
			if c.answer != "" {
				want = c.answer
			}
			sameJSON(t, "API form", api, []byte(want))
		})
	}
}

// TestEventFormsBytes: bytes are written in URL-safe base64 with padding,
// as ADK Python writes them, whichever alphabet and padding they come in.
func TestEventFormsBytes(t *testing.T) {
	const want = `{"content":{"parts":[{"inline_data":{"data":"-_-_AA==","mime_type":"image/png"}},{"thought_signature":"AQID"},` +
		`{"function_response":{"parts":[{"inline_data":{"data":"_w=="}}]}}]}}`
	for _, in := range []string{
		`{"content":{"parts":[{"inlineData":{"data":"+/+/AA==","mimeType":"image/png"}},{"thoughtSignature":"AQID"},` +
			`{"functionResponse":{"parts":[{"inlineData":{"data":"/w=="}}]}}]}}`,
		`{"content":{"parts":[{"inlineData":{"data":"-_-_AA","mimeType":"image/png"}},{"thoughtSignature":"AQID"},` +
			`{"functionResponse":{"parts":[{"inlineData":{"data":"_w"}}]}}]}}`,
	} {
		st, err := StorageForm([]byte(in))
		require.NoError(t, err)
		sameJSON(t, "storage form of "+in, st, []byte(want))
	}
	// Not base64: kept as given.
	st, err := StorageForm([]byte(`{"content":{"parts":[{"inlineData":{"data":"not base64!"}}]}}`))
	require.NoError(t, err)
	sameJSON(t, "not base64", st, []byte(`{"content":{"parts":[{"inline_data":{"data":"not base64!"}}]}}`))

	// StandardBytes gives Go's encoding/json standard base64.
	got := StandardBytes("content", []byte(`{"parts":[{"inlineData":{"data":"-_-_AA"}},{"thoughtSignature":"AQID"}]}`))
	sameJSON(t, "standard bytes", got, []byte(`{"parts":[{"inlineData":{"data":"+/+/AA=="}},{"thoughtSignature":"AQID"}]}`))
}

// TestEventFormsAuthSchemeUnion: an auth scheme becomes the model pydantic's
// smart union picks, and is written and answered as ADK writes and answers
// it (persist/testdata/adk-python holds what ADK itself did with these).
func TestEventFormsAuthSchemeUnion(t *testing.T) {
	cases := []struct{ name, in, storage, api string }{
		{"API key", `{"type":"apiKey","in":"header","name":"X-Api-Key"}`,
			`{"type_":"apiKey","in_":"header","name":"X-Api-Key"}`,
			// ADK's FastAPI APIKey cannot read "in_" back: the row answers as its CustomAuthScheme.
			`{"type":"apiKey","in_":"header","name":"X-Api-Key"}`},
		{"OAuth2 without type", `{"flows":{"password":{"tokenUrl":"t"}}}`,
			`{"type_":"oauth2","flows":{"password":{"tokenUrl":"t","scopes":{}}}}`,
			`{"type":"oauth2","type_":"oauth2","flows":{"password":{"tokenUrl":"t","scopes":{}}}}`},
		{"HTTP basic", `{"type":"http","scheme":"basic","description":null}`,
			`{"type_":"http","scheme":"basic"}`,
			`{"type":"http","type_":"http","scheme":"basic"}`},
		{"custom", `{"type":"myScheme","my_field":{"aB":1}}`,
			`{"type_":"myScheme","my_field":{"aB":1}}`,
			`{"type":"myScheme","my_field":{"aB":1}}`},
		{"OpenID Connect with config", `{"type":"openIdConnect","authorization_endpoint":"a","token_endpoint":"t","scopes":["openid"]}`,
			`{"type_":"openIdConnect","authorization_endpoint":"a","token_endpoint":"t","scopes":["openid"]}`,
			`{"type":"openIdConnect","type_":"openIdConnect","authorization_endpoint":"a","token_endpoint":"t","scopes":["openid"]}`},
		{"anything else is an HTTP bearer", `{"flows":"x"}`,
			`{"type_":"http","scheme":"bearer","flows":"x"}`,
			`{"type":"http","type_":"http","scheme":"bearer","flows":"x"}`},
		{"not a scheme ADK reads", `{"scheme":5}`, `{"scheme":5}`, `{"scheme":5}`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			st := authScheme([]byte(c.in), toStorage)
			sameJSON(t, "storage", st, []byte(c.storage))
			sameJSON(t, "answer", authScheme(st, toAPI), []byte(c.api))
			// ADK's answer, sent back, is stored as ADK stores it.
			sameJSON(t, "answer stored again", authScheme([]byte(c.api), toStorage), []byte(c.storage))
		})
	}
}

// TestEventFormsForeignRows: rows other writers produced (ADK JS's
// camelCase content, fields of newer ADK versions) read in API form.
func TestEventFormsForeignRows(t *testing.T) {
	api, err := APIForm([]byte(`{"invocation_id":"i","content":{"parts":[{"functionCall":{"name":"f","args":{"a_b":1}}},` +
		`{"function_call":{"name":"g"},"functionCall":{"name":"h"}}]},"future_field":{"keep_this":1},"custom_metadata":null,` +
		`"actions":{"state_delta":{},"future_action":[{"x_y":1}]}}`))
	require.NoError(t, err)
	sameJSON(t, "API form", api, []byte(`{"invocationId":"i","content":{"parts":[{"functionCall":{"name":"f","args":{"a_b":1}}},`+
		`{"functionCall":{"name":"h"}}]},"futureField":{"keep_this":1},"actions":{"stateDelta":{},"futureAction":[{"x_y":1}]}}`))
}

// TestEventFormsRowsOfBefore: rows written before the top-level rule hold
// an event's unknown fields in custom_metadata["adksession:extra"]; they
// read back at the top level, and are written back there.
func TestEventFormsRowsOfBefore(t *testing.T) {
	for _, c := range []struct{ name, old, api, storage string }{{
		name: "with metadata of the application",
		old:  `{"author":"a","custom_metadata":{"my_key":1,"adksession:extra":{"routes":["x"],"requestedInput":{"interruptId":"i"}},"adksession:actions":{"futureAction":1}},"actions":{}}`,
		api:  `{"author":"a","customMetadata":{"my_key":1},"routes":["x"],"requestedInput":{"interruptId":"i"},"actions":{"futureAction":1}}`,
		storage: `{"author":"a","custom_metadata":{"my_key":1,"adksession:actions":{"futureAction":1}},"actions":{},` +
			`"routes":["x"],"requested_input":{"interruptId":"i"}}`,
	}, {
		name:    "an empty metadata marked empty",
		old:     `{"author":"a","custom_metadata":{"adksession:empty":true,"adksession:extra":{"isCompacted":true}}}`,
		api:     `{"author":"a","customMetadata":{},"isCompacted":true}`,
		storage: `{"author":"a","custom_metadata":{},"is_compacted":true}`,
	}, {
		name:    "no metadata of the application",
		old:     `{"author":"a","custom_metadata":{"adksession:extra":{"isCompacted":true}}}`,
		api:     `{"author":"a","isCompacted":true}`,
		storage: `{"author":"a","is_compacted":true}`,
	}} {
		t.Run(c.name, func(t *testing.T) {
			api, err := APIForm([]byte(c.old))
			require.NoError(t, err)
			sameJSON(t, "API form", api, []byte(c.api))
			st, err := StorageForm(api)
			require.NoError(t, err)
			sameJSON(t, "storage form", st, []byte(c.storage))
		})
	}
}

// TestJSKeysAreADKJS: jsSnake and jsCamel are ADK JS 2.0.0's toSnakeCaseKey
// and toCamelCaseKey, and jsCamel gives back every key without "_".
func TestJSKeysAreADKJS(t *testing.T) {
	for in, want := range map[string]string{
		"isCompacted": "is_compacted", "startTime": "start_time", "ID": "_i_d", "x2D": "x2_d", "a": "a", "": "",
		"already_snake": "already_snake", "éA": "é_a",
	} {
		require.Equal(t, want, jsSnake(in), "jsSnake(%q)", in)
		if !strings.Contains(in, "_") {
			require.Equal(t, in, jsCamel(jsSnake(in)), "jsCamel(jsSnake(%q))", in)
		}
	}
	for in, want := range map[string]string{
		"is_compacted": "isCompacted", "x_2d": "x_2d", "_i_d": "ID", "a__b": "a_B", "a_": "a_", "A_b": "AB",
	} {
		require.Equal(t, want, jsCamel(in), "jsCamel(%q)", in)
	}
}

func TestCamelIsPydanticToCamel(t *testing.T) {
	for in, want := range map[string]string{
		"function_call": "functionCall", "functionCall": "functionCall", "type_": "type_", "x_2d": "x2D",
		"auth_provider_x509_cert_url": "authProviderX509CertUrl", "_private_key": "_privateKey", "a": "a",
		"HTTP_code": "httpCode", "token_id": "tokenId",
	} {
		if got := camel(in); got != want {
			t.Errorf("camel(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestModelsBuild(t *testing.T) {
	for name, m := range models {
		for _, f := range m.fields {
			if f.kind >= kindModel && f.kind <= kindModelMap && f.model == nil {
				t.Errorf("%s.%s has no model", name, f.storage)
			}
		}
	}
	if eventModel == nil || actionsModel == nil {
		t.Fatal("no Event or EventActions model")
	}
}

func TestStorageFormRefusesNonObjects(t *testing.T) {
	for _, in := range []string{`[]`, `"x"`, `{`, `{"actions":[1]}`, `{"customMetadata":1,"routes":[1]}`} {
		if _, err := StorageForm([]byte(in)); err == nil {
			t.Errorf("StorageForm(%s): no error", in)
		}
	}
	var top map[string]json.RawMessage
	require.NoError(t, json.Unmarshal([]byte(`{"invocation_id":"x"}`), &top))
	if !IsStorageForm(top) {
		t.Error("IsStorageForm: snake_case key not seen")
	}
}

// FuzzCompact: compact writes what json.Compact writes, for valid JSON.
func FuzzCompact(f *testing.F) {
	for _, s := range []string{`{"a": [1, 2, {"b" : "c d\" e\\"}]}`, " \t\n\r1 ", `"\u00e9 \n"`, `[ ]`, `{ }`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		if !json.Valid(in) {
			return
		}
		var want bytes.Buffer
		if err := json.Compact(&want, in); err != nil {
			t.Fatal(err)
		}
		if got := compact(bytes.Clone(in)); !bytes.Equal(got, want.Bytes()) {
			t.Fatalf("%q: compact %q, json.Compact %q", in, got, want.Bytes())
		}
	})
}

// TestStorageEventReadsTheKeysTheServiceReads: the flusher's conversion
// (StorageEvent) takes an event's id and invocation id from the keys the
// service's decoder reads, "id" and "invocationId" exactly. A key that only
// differs in case is another of the event's keys (the service accepted it as
// one): read as the id it named the row apart from its event ("ID"), or
// failed the row, and the event went to the dead letters ("Id" an object).
func TestStorageEventReadsTheKeysTheServiceReads(t *testing.T) {
	for _, tc := range []struct{ name, event string }{
		{"a string", `{"id":"e","invocationId":"i","author":"a","timestamp":1.5,"actions":{"stateDelta":{}},"ID":"x","InvocationID":"y"}`},
		{"an object", `{"id":"e","invocationId":"i","author":"a","timestamp":1.5,"actions":{"stateDelta":{}},"Id":{},"invocationid":[1]}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			id, inv, storage, err := StorageEvent([]byte(tc.event))
			require.NoError(t, err)
			require.Equal(t, "e", id)
			require.Equal(t, "i", inv)
			var row map[string]any
			require.NoError(t, json.Unmarshal(storage, &row))
			require.Equal(t, "e", row["id"])
			require.Equal(t, "i", row["invocation_id"])
			require.Len(t, row, 7, "the keys that differ in case stay in the row's data: %s", storage)
		})
	}
}
