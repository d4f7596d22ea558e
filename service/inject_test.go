package service

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/adksession/adksession/cache/base"
)

func TestInjectState(t *testing.T) {
	state := map[string]any{
		"topic":          "friendship",
		"user_name":      "Foo",
		"app_state":      "active",
		"user_age":       float64(30),
		"favorite_color": "blue",
		"app:user_name":  "AppFoo",
		"user:lang":      "fr",
		"temp:step":      float64(2),
		"ratio":          0.25,
		"big":            1e21,
		"ok":             true,
		"nothing":        nil,
		"profile":        map[string]any{"name": "Ann", "age": float64(3)},
		"tags":           []any{"a", float64(1)},
		"café":           "crème",
	}
	for _, tc := range []struct {
		name, template, want string
	}{
		// The seed's example.
		{"seed key", "Write a short story about a cat, focusing on the theme: {topic}.", "Write a short story about a cat, focusing on the theme: friendship."},
		// The seed's optional key.
		{"seed optional absent", "Theme: {missing?}.", "Theme: ."},
		{"optional present", "Theme: {topic?}.", "Theme: friendship."},
		// The seed's literal braces: JSON examples are left as they are.
		{"seed JSON example", `Format your output as JSON: {"city": "<name>", "population": <number>}`, `Format your output as JSON: {"city": "<name>", "population": <number>}`},
		{"nested JSON", `{"a": {"b": 1}}`, `{"a": {"b": 1}}`},
		// f-string double braces reach ADK as {{key}}: ADK's pattern takes them as {key}.
		{"double braces", "Topic: {{topic}}", "Topic: friendship"},
		{"spaces inside", "Topic: { topic }", "Topic: friendship"},
		// ADK's own tests (tests/unittests/utils/test_instructions_utils.py).
		{"adk two keys", "Hello {user_name}, you are in {app_state} state.", "Hello Foo, you are in active state."},
		{"adk invalid name", "Hello {invalid-key}!", "Hello {invalid-key}!"},
		{"adk invalid prefix", "Hello {invalid:key}!", "Hello {invalid:key}!"},
		{"adk app prefix", "Hello {app:user_name}!", "Hello AppFoo!"},
		{"adk several", "Hello {user_name},\nYou are {user_age} years old.\nYour favorite color is {favorite_color?}.", "Hello Foo,\nYou are 30 years old.\nYour favorite color is blue."},
		{"user prefix", "{user:lang}", "fr"},
		{"temp prefix", "step {temp:step}", "step 2"},
		{"two colons", "{app:user:x}", "{app:user:x}"},
		{"dotted name untouched", "{profile.name}", "{profile.name}"},
		{"space in name", "{topic ?}", "{topic ?}"},
		{"empty braces", "{}", "{}"},
		{"digit first", "{1abc}", "{1abc}"},
		{"unicode identifier", "{café}", "crème"},
		{"float", "{ratio}", "0.25"},
		{"huge float", "{big}", "1e+21"},
		{"bool", "{ok}", "true"},
		{"null", "[{nothing}]", "[]"},
		{"map as JSON", "{profile}", `{"age":3,"name":"Ann"}`},
		{"list as JSON", "{tags}", `["a",1]`},
		{"no placeholders", "plain text", "plain text"},
		{"unbalanced", "{topic", "{topic"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sess := &Session{ref: base.SessionRef{ID: "s1"}, state: state}
			got, err := InjectState(context.Background(), tc.template, sess)
			require.NoError(t, err)
			require.Equal(t, tc.want, got)
		})
	}
}

func TestInjectStateErrors(t *testing.T) {
	sess := &Session{ref: base.SessionRef{ID: "s1"}, state: map[string]any{"user_name": "Foo"}}
	for _, tc := range []struct {
		name, template string
		is             error
		mentions       string
	}{
		{"missing key", "Hello {missing_key}!", ErrStateKeyNotExist, `"missing_key"`},
		{"missing prefixed key", "{user:missing}", ErrStateKeyNotExist, `"user:missing"`},
		{"artifact", "The artifact content is: {artifact.my_file}", ErrNoArtifactService, `"my_file"`},
		{"optional artifact", "{artifact.my_file?}", ErrNoArtifactService, `"my_file"`},
		{"empty artifact name", "{artifact.}", ErrNoArtifactService, `""`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := InjectState(context.Background(), tc.template, sess)
			require.ErrorIs(t, err, tc.is)
			require.Contains(t, err.Error(), tc.mentions)
		})
	}
	_, err := InjectState(context.Background(), "{x}", nil)
	require.ErrorIs(t, err, ErrInvalidArgument)
}
