package eventjson

import (
	"encoding/json"
	"slices"
)

// An AuthConfig's auth_scheme is ADK Python's AuthScheme, the union
//
//	APIKey | HTTPBase | OAuth2 | OpenIdConnect | HTTPBearer   (FastAPI's OpenAPI models)
//	| OpenIdConnectWithConfig | CustomAuthScheme            (ADK's)
//
// FastAPI's models have camelCase field names (bearerFormat, flows.authorizationCode.tokenUrl,
// openIdConnectUrl): those keys are the same in both forms. Two fields have an alias: type_
// ("type") and APIKey's in_ ("in"); the FastAPI models accept only the alias (no
// populate_by_name), ADK's CustomAuthScheme both. Which model a scheme becomes is pydantic's
// smart-union choice, and what ADK writes and answers follows from it: model_dump writes
// "type_" and "in_"; reading that back, a FastAPI model sees "type_" as an extra (its type
// comes from the default) and APIKey cannot see "in" at all, so an API key scheme comes back
// as a CustomAuthScheme. authScheme reproduces that choice, so that adksession writes what
// ADK writes and answers what ADK's api_server answers, key for key.

// schemeField is a field of one model of the union.
type schemeField struct {
	name, alias string
	// valid checks a present value and returns how many fields of nested
	// models it sets (pydantic counts them too).
	valid    func(v []byte) (bool, int)
	required bool
	// enum: validated as an Enum from a string, which pydantic counts as a
	// lax match.
	enum bool
	// def is the JSON default that model_dump writes when the field was not
	// given ("" for None).
	def string
}

type schemeModel struct {
	fields []schemeField
	// byName: the model also accepts field names (populate_by_name).
	byName bool
}

func securityType(def string) schemeField {
	return schemeField{name: "type_", alias: "type", valid: oneOf("apiKey", "http", "oauth2", "openIdConnect"),
		enum: true, def: `"` + def + `"`}
}

func plain(name string, valid func([]byte) (bool, int), required bool) schemeField {
	return schemeField{name: name, alias: name, valid: valid, required: required}
}

var description = plain("description", optional(isString), false)

// authSchemes is the union in pydantic's order (FastAPI 0.133+, ADK bb56aa56).
var authSchemes = []schemeModel{
	{fields: []schemeField{securityType("apiKey"), description,
		{name: "in_", alias: "in", valid: oneOf("query", "header", "cookie"), required: true, enum: true},
		plain("name", isString, true)}},
	{fields: []schemeField{securityType("http"), description, plain("scheme", isString, true)}},
	{fields: []schemeField{securityType("oauth2"), description, plain("flows", oauthFlows, true)}},
	{fields: []schemeField{securityType("openIdConnect"), description, plain("openIdConnectUrl", isString, true)}},
	{fields: []schemeField{securityType("http"), description,
		{name: "scheme", alias: "scheme", valid: oneOf("bearer"), def: `"bearer"`},
		plain("bearerFormat", optional(isString), false)}},
	{fields: []schemeField{securityType("openIdConnect"), description,
		plain("authorization_endpoint", isString, true), plain("token_endpoint", isString, true),
		plain("userinfo_endpoint", optional(isString), false), plain("revocation_endpoint", optional(isString), false),
		plain("token_endpoint_auth_methods_supported", optional(stringList), false),
		plain("grant_types_supported", optional(stringList), false), plain("scopes", optional(stringList), false)}},
	{byName: true, fields: []schemeField{{name: "type_", alias: "type", valid: isString, required: true}}},
}

// oauthFlowFields are the fields of FastAPI's OAuthFlows: each flow with its
// required URLs.
var oauthFlowFields = map[string][]string{
	"implicit":          {"authorizationUrl"},
	"password":          {"tokenUrl"},
	"clientCredentials": {"tokenUrl"},
	"authorizationCode": {"authorizationUrl", "tokenUrl"},
}

// authScheme converts an auth scheme: it picks the model pydantic picks for
// v and writes it as model_dump does, by field name (toStorage) or by alias.
// A value no model accepts (ADK cannot read it) is kept as given.
func authScheme(v []byte, dir direction) []byte {
	in, ok := objectMembers(v)
	if !ok {
		return v
	}
	best, bestCount, bestLax := -1, 0, false
	for i, m := range authSchemes {
		count, lax, ok := m.validate(in)
		if ok && (best < 0 || count > bestCount || count == bestCount && bestLax && !lax) {
			best, bestCount, bestLax = i, count, lax
		}
	}
	if best < 0 {
		return v
	}
	return writeObject(authSchemes[best].dump(in, dir))
}

// lookup returns the member holding field f, as pydantic looks it up: by
// alias, then by name when the model allows it.
func (m schemeModel) lookup(in []member, f schemeField) (int, bool) {
	if i := memberIndex(in, f.alias); i >= 0 {
		return i, true
	}
	if m.byName {
		if i := memberIndex(in, f.name); i >= 0 {
			return i, true
		}
	}
	return -1, false
}

// validate returns the number of fields v sets (nested models included)
// and whether a field matched only laxly; ok is false when the model
// rejects v.
func (m schemeModel) validate(in []member) (count int, lax, ok bool) {
	for _, f := range m.fields {
		i, found := m.lookup(in, f)
		if !found {
			if f.required {
				return 0, false, false
			}
			continue
		}
		valid, nested := f.valid(in[i].val)
		if !valid {
			return 0, false, false
		}
		count += 1 + nested
		lax = lax || f.enum
	}
	return count, lax, true
}

// dump writes the model's fields (by name or alias), then its extras, as
// model_dump(exclude_none=True) does: an extra with a field's key replaces it.
func (m schemeModel) dump(in []member, dir direction) []member {
	var out []member
	used := make([]bool, len(in))
	for _, f := range m.fields {
		key := f.alias
		if dir == toStorage {
			key = f.name
		}
		i, found := m.lookup(in, f)
		switch {
		case found:
			used[i] = true
			if !isNull(in[i].val) {
				val := in[i].val
				if f.name == "flows" {
					val = dumpFlows(val)
				}
				out = append(out, member{key, val})
			}
		case f.def != "":
			out = append(out, member{key, []byte(f.def)})
		}
	}
	for i, mb := range in {
		if used[i] || isNull(mb.val) {
			continue
		}
		if j := memberIndex(out, mb.key); j >= 0 {
			out[j].val = mb.val
			continue
		}
		out = append(out, mb)
	}
	return out
}

// dumpFlows writes OAuthFlows as pydantic does: flows without null members,
// each with its scopes ({} when not given).
func dumpFlows(v []byte) []byte {
	flows, _ := objectMembers(v) // validated by oauthFlows
	var out []member
	for _, fl := range flows {
		if isNull(fl.val) {
			continue
		}
		if _, known := oauthFlowFields[fl.key]; known {
			fields, _ := objectMembers(fl.val)
			fields = slices.DeleteFunc(fields, func(m member) bool { return isNull(m.val) })
			if memberIndex(fields, "scopes") < 0 {
				fields = append(fields, member{"scopes", []byte("{}")})
			}
			fl.val = writeObject(fields)
		}
		out = append(out, fl)
	}
	return writeObject(out)
}

// oauthFlows validates FastAPI's OAuthFlows.
func oauthFlows(v []byte) (bool, int) {
	flows, ok := objectMembers(v)
	if !ok {
		return false, 0
	}
	count := 0
	for _, fl := range flows {
		required, known := oauthFlowFields[fl.key]
		if !known {
			continue
		}
		count++
		if isNull(fl.val) {
			continue
		}
		fields, ok := objectMembers(fl.val)
		if !ok {
			return false, 0
		}
		for _, name := range required {
			if i := memberIndex(fields, name); i < 0 || !isJSONString(fields[i].val) {
				return false, 0
			}
			count++
		}
		if i := memberIndex(fields, "refreshUrl"); i >= 0 {
			if !isNull(fields[i].val) && !isJSONString(fields[i].val) {
				return false, 0
			}
			count++
		}
		if i := memberIndex(fields, "scopes"); i >= 0 {
			if ok, _ := stringMap(fields[i].val); !ok {
				return false, 0
			}
			count++
		}
	}
	return true, count
}

func isString(v []byte) (bool, int) { return isJSONString(v), 0 }

func optional(valid func([]byte) (bool, int)) func([]byte) (bool, int) {
	return func(v []byte) (bool, int) {
		if isNull(v) {
			return true, 0
		}
		return valid(v)
	}
}

func oneOf(values ...string) func([]byte) (bool, int) {
	return func(v []byte) (bool, int) {
		var s string
		if !isJSONString(v) || json.Unmarshal(v, &s) != nil {
			return false, 0
		}
		return slices.Contains(values, s), 0
	}
}

func stringList(v []byte) (bool, int) {
	var l []string
	return json.Unmarshal(v, &l) == nil && v[0] == '[', 0
}

func stringMap(v []byte) (bool, int) {
	var m map[string]string
	return json.Unmarshal(v, &m) == nil && v[0] == '{', 0
}
