package eventjson

import (
	"fmt"
	"strings"
)

// The models an event is made of, as ADK Python (main of 2026-07, bb56aa56)
// and google-genai 2.14.0 declare them. Every model with
// alias_generator=to_camel has its fields under their snake_case name in the
// storage form (what Event.model_dump(exclude_none=True, mode="json") writes
// to event_data) and under the camelCase alias in the API form (what ADK's
// api_server answers, by_alias=True).
//
// A field spec is "name[=alias][:type]": the storage name, the API name when
// it is not the camelCase of name, and the type when the value is itself
// converted:
//
//	Model    an object of that model
//	Model[]  a list of them
//	Model{}  a map of them, keyed by the application (function-call ids)
//	bytes    base64 (see rebase64)
//	scheme   ADK's AuthScheme union (see authscheme.go)
//
// A value of any other field is kept as given: scalars, lists of scalars and
// the free-form maps (state_delta, artifact_delta, agent_state, output,
// custom_metadata, args, response, part_metadata, payload, scopes,
// additional_headers, ...), and cache_metadata, a model without aliases.
// Models whose unknown keys are renamed (renameExtra) list only the fields
// whose value is converted: any other key is a field too (by convention
// camelCase of its snake_case name) whose value is kept.

// extraMode is what happens to a key a model does not list.
type extraMode uint8

const (
	// renameExtra: a field of the model (extra="forbid" or "ignore"); its key
	// follows the camelCase convention, its value is kept.
	renameExtra extraMode = iota
	// keepExtra: an extra of an extra="allow" model (ADK's auth models),
	// kept as given, key and value, as pydantic keeps it.
	keepExtra
	// stashExtra: a field of EventActions that ADK Python does not know
	// (its EventActions is extra="forbid"): StorageForm moves it into
	// custom_metadata, APIForm restores it.
	stashExtra
	// topExtra: a top-level field of an event that ADK Python's Event does
	// not know (extra="ignore": it reads the row without it), such as ADK
	// JS's CompactedEvent fields: kept at the top level, its key renamed as
	// ADK JS's DatabaseSessionService renames it (jsSnake, jsCamel), its
	// value kept.
	topExtra
)

type modelSpec struct {
	name   string
	extra  extraMode
	fields string
}

// adkModels are ADK Python's models. Event and EventActions list every
// field (the others stay at the top level, or go to custom_metadata); the
// auth models, extra="allow", every declared field (extras keep their keys).
var adkModels = []modelSpec{
	{"Event", topExtra, "model_version content:Content grounding_metadata:GroundingMetadata partial turn_complete " +
		"turn_complete_reason finish_reason error_code error_message interrupted custom_metadata " +
		"usage_metadata:GenerateContentResponseUsageMetadata " +
		"live_session_resumption_update:LiveServerSessionResumptionUpdate live_session_id go_away:LiveServerGoAway " +
		"voice_activity:VoiceActivity input_transcription:Transcription output_transcription:Transcription " +
		"avg_logprobs logprobs_result:LogprobsResult cache_metadata citation_metadata:CitationMetadata " +
		"interaction_id environment_id invocation_id author actions:EventActions output node_info:NodeInfo " +
		"long_running_tool_ids branch isolation_scope id timestamp"},
	{"NodeInfo", renameExtra, ""},
	{"EventActions", stashExtra, "skip_summarization state_delta artifact_delta transfer_to_agent escalate " +
		"requested_auth_configs:AuthConfig{} requested_tool_confirmations:ToolConfirmation{} " +
		"compaction:EventCompaction end_of_agent agent_state rewind_before_invocation_id route " +
		"render_ui_widgets:UiWidget[] set_model_response"},
	{"EventCompaction", renameExtra, "compacted_content:Content"},
	{"ToolConfirmation", renameExtra, ""},
	{"UiWidget", renameExtra, ""},
	{"AuthConfig", keepExtra, "auth_scheme:scheme raw_auth_credential:AuthCredential " +
		"exchanged_auth_credential:AuthCredential credential_key"},
	{"AuthCredential", keepExtra, "auth_type resource_ref api_key http:HttpAuth service_account:ServiceAccount " +
		"oauth2:OAuth2Auth"},
	{"HttpAuth", keepExtra, "scheme credentials:HttpCredentials additional_headers"},
	{"HttpCredentials", keepExtra, "username password token"},
	{"OAuth2Auth", keepExtra, "client_id client_secret auth_uri nonce state redirect_uri auth_response_uri " +
		"auth_code access_token refresh_token id_token expires_at expires_in audience prompt code_verifier " +
		"code_challenge_method token_endpoint_auth_method"},
	{"ServiceAccount", keepExtra, "service_account_credential:ServiceAccountCredential scopes " +
		"use_default_credential use_id_token audience"},
	{"ServiceAccountCredential", keepExtra, "type_=type project_id private_key_id private_key client_email " +
		"client_id auth_uri token_uri auth_provider_x509_cert_url client_x509_cert_url universe_domain"},
}

// genaiModels are the google-genai 2.14.0 models an event holds (all
// extra="forbid"), with the fields whose value is converted.
var genaiModels = []modelSpec{
	{"Blob", renameExtra, "data:bytes"},
	{"Citation", renameExtra, "publication_date:GoogleTypeDate"},
	{"CitationMetadata", renameExtra, "citations:Citation[]"},
	{"CodeExecutionResult", renameExtra, ""},
	{"Content", renameExtra, "parts:Part[]"},
	{"ExecutableCode", renameExtra, ""},
	{"FileData", renameExtra, ""},
	{"FunctionCall", renameExtra, "partial_args:PartialArg[]"},
	{"FunctionResponse", renameExtra, "parts:FunctionResponsePart[]"},
	{"FunctionResponseBlob", renameExtra, "data:bytes"},
	{"FunctionResponseFileData", renameExtra, ""},
	{"FunctionResponsePart", renameExtra, "inline_data:FunctionResponseBlob file_data:FunctionResponseFileData"},
	{"GenerateContentResponseUsageMetadata", renameExtra, "cache_tokens_details:ModalityTokenCount[] " +
		"candidates_tokens_details:ModalityTokenCount[] prompt_tokens_details:ModalityTokenCount[] " +
		"tool_use_prompt_tokens_details:ModalityTokenCount[]"},
	{"GoogleTypeDate", renameExtra, ""},
	{"GroundingChunk", renameExtra, "image:GroundingChunkImage maps:GroundingChunkMaps " +
		"retrieved_context:GroundingChunkRetrievedContext web:GroundingChunkWeb"},
	{"GroundingChunkCustomMetadata", renameExtra, "string_list_value:GroundingChunkStringList"},
	{"GroundingChunkImage", renameExtra, ""},
	{"GroundingChunkMaps", renameExtra, "place_answer_sources:GroundingChunkMapsPlaceAnswerSources " +
		"route:GroundingChunkMapsRoute"},
	{"GroundingChunkMapsPlaceAnswerSources", renameExtra, "review_snippet:GroundingChunkMapsPlaceAnswerSourcesReviewSnippet[] " +
		"review_snippets:GroundingChunkMapsPlaceAnswerSourcesReviewSnippet[]"},
	{"GroundingChunkMapsPlaceAnswerSourcesAuthorAttribution", renameExtra, ""},
	{"GroundingChunkMapsPlaceAnswerSourcesReviewSnippet", renameExtra, "author_attribution:GroundingChunkMapsPlaceAnswerSourcesAuthorAttribution"},
	{"GroundingChunkMapsRoute", renameExtra, ""},
	{"GroundingChunkRetrievedContext", renameExtra, "rag_chunk:RagChunk custom_metadata:GroundingChunkCustomMetadata[]"},
	{"GroundingChunkStringList", renameExtra, ""},
	{"GroundingChunkWeb", renameExtra, ""},
	{"GroundingMetadata", renameExtra, "grounding_chunks:GroundingChunk[] grounding_supports:GroundingSupport[] " +
		"retrieval_metadata:RetrievalMetadata search_entry_point:SearchEntryPoint " +
		"source_flagging_uris:GroundingMetadataSourceFlaggingUri[]"},
	{"GroundingMetadataSourceFlaggingUri", renameExtra, ""},
	{"GroundingSupport", renameExtra, "segment:Segment"},
	{"LiveServerGoAway", renameExtra, ""},
	{"LiveServerSessionResumptionUpdate", renameExtra, ""},
	{"LogprobsResult", renameExtra, "chosen_candidates:LogprobsResultCandidate[] top_candidates:LogprobsResultTopCandidates[]"},
	{"LogprobsResultCandidate", renameExtra, ""},
	{"LogprobsResultTopCandidates", renameExtra, "candidates:LogprobsResultCandidate[]"},
	{"ModalityTokenCount", renameExtra, ""},
	{"Part", renameExtra, "media_resolution:PartMediaResolution code_execution_result:CodeExecutionResult " +
		"executable_code:ExecutableCode file_data:FileData function_call:FunctionCall " +
		"function_response:FunctionResponse inline_data:Blob thought_signature:bytes video_metadata:VideoMetadata " +
		"tool_call:ToolCall tool_response:ToolResponse audio_transcription:Transcription"},
	{"PartMediaResolution", renameExtra, ""},
	{"PartialArg", renameExtra, ""},
	{"RagChunk", renameExtra, "page_span:RagChunkPageSpan"},
	{"RagChunkPageSpan", renameExtra, ""},
	{"RetrievalMetadata", renameExtra, ""},
	{"SearchEntryPoint", renameExtra, "sdk_blob:bytes"},
	{"Segment", renameExtra, ""},
	{"ToolCall", renameExtra, ""},
	{"ToolResponse", renameExtra, ""},
	{"Transcription", renameExtra, "words:WordInfo[]"},
	{"VideoMetadata", renameExtra, ""},
	{"VoiceActivity", renameExtra, ""},
	{"WordInfo", renameExtra, ""},
}

// kind is how a field's value is converted.
type kind uint8

const (
	kindValue     kind = iota // kept as given
	kindModel                 // an object of model
	kindModelList             // a list of objects of model
	kindModelMap              // a map of objects of model, keys kept
	kindBytes                 // base64
	kindScheme                // ADK's AuthScheme union
)

type field struct {
	storage, api string
	kind         kind
	model        *model
}

// model is one pydantic model: its fields by storage and by API key (ADK
// reads either: populate_by_name=True).
type model struct {
	name  string
	extra extraMode
	keys  map[string]*field
	// fields in declaration order (the full list for stashExtra, topExtra
	// and keepExtra models).
	fields []*field
}

// models are every model by name; eventModel is the root of an event.
var (
	models     = buildModels(adkModels, genaiModels)
	eventModel = models["Event"]
)

// buildModels parses the specs; it panics on a spec error (a test builds
// them).
func buildModels(specs ...[]modelSpec) map[string]*model {
	out := map[string]*model{}
	for _, list := range specs {
		for _, s := range list {
			out[s.name] = &model{name: s.name, extra: s.extra, keys: map[string]*field{}}
		}
	}
	for _, list := range specs {
		for _, s := range list {
			m := out[s.name]
			for _, spec := range strings.Fields(s.fields) {
				f, err := parseField(spec, out)
				if err != nil {
					panic(fmt.Sprintf("eventjson: model %s: %v", s.name, err))
				}
				m.fields = append(m.fields, f)
				m.keys[f.storage], m.keys[f.api] = f, f
			}
		}
	}
	return out
}

func parseField(spec string, models map[string]*model) (*field, error) {
	name, typ, _ := strings.Cut(spec, ":")
	storage, api, aliased := strings.Cut(name, "=")
	if !aliased {
		api = camel(storage)
	}
	f := &field{storage: storage, api: api}
	switch {
	case typ == "":
		f.kind = kindValue
	case typ == "bytes":
		f.kind = kindBytes
	case typ == "scheme":
		f.kind = kindScheme
	case strings.HasSuffix(typ, "[]"):
		f.kind, typ = kindModelList, strings.TrimSuffix(typ, "[]")
	case strings.HasSuffix(typ, "{}"):
		f.kind, typ = kindModelMap, strings.TrimSuffix(typ, "{}")
	default:
		f.kind = kindModel
	}
	if f.kind >= kindModel && f.kind <= kindModelMap {
		if f.model = models[typ]; f.model == nil {
			return nil, fmt.Errorf("field %s: unknown model %s", storage, typ)
		}
	}
	return f, nil
}

// knownKeys holds the keys an event's objects mostly have, each as one
// string (unquote returns these instead of a new string per member): every
// field of every model in both forms, and the fields of the genai models
// that the specs do not list because their values are kept.
var knownKeys = func() map[string]string {
	out := map[string]string{}
	for _, m := range models {
		for _, f := range m.fields {
			out[f.storage], out[f.api] = f.storage, f.api
		}
	}
	for _, k := range []string{"text", "role", "thought", "name", "args", "response", "data", "mime_type", "mimeType",
		"display_name", "displayName", "file_uri", "fileUri", "will_continue", "willContinue", "scheduling"} {
		out[k] = k
	}
	return out
}()
