-- The compacted view's indexes (docs/persistence.md, "The compacted view in
-- SQL"): what a compacted Get of a session Redis lost reads by index instead
-- of the whole history. Expression indexes over event_data, so that they
-- cover every row, those ADK Python and ADK JS write too; ADK's columns are
-- left as they are. Only speed depends on them (ADK JS's init() drops
-- indexes it does not declare: the queries then read the session's events).
--
-- adksession_events_marked: the events every compacted view reads (ADK
-- Python's actions.compaction, ADK JS's is_compacted, a rewind, an isolation
-- scope), by time. Both spellings of each name: a superset does no harm.
CREATE INDEX IF NOT EXISTS adksession_events_marked
  ON events (app_name, user_id, session_id, "timestamp")
  WHERE (event_data -> 'actions' -> 'compaction') IS NOT NULL
     OR (event_data -> 'actions' -> 'rewind_before_invocation_id') IS NOT NULL
     OR (event_data -> 'actions' -> 'rewindBeforeInvocationId') IS NOT NULL
     OR event_data ? 'is_compacted' OR event_data ? 'isCompacted'
     OR event_data ? 'isolation_scope' OR event_data ? 'isolationScope';
-- adksession_events_calls, adksession_events_answers: the events that call /
-- answer a function call id (the calls of a kept response, their siblings'
-- answers, a scoped agent's first call), of the events that have any.
CREATE INDEX IF NOT EXISTS adksession_events_calls
  ON events USING gin ((jsonb_path_query_array(event_data,
    '$.content.parts[*].keyvalue() ? (@.key == "function_call" || @.key == "functionCall").value.id')))
  WHERE jsonb_path_exists(event_data,
    '$.content.parts[*] ? (exists(@.function_call) || exists(@.functionCall))');
CREATE INDEX IF NOT EXISTS adksession_events_answers
  ON events USING gin ((jsonb_path_query_array(event_data,
    '$.content.parts[*].keyvalue() ? (@.key == "function_response" || @.key == "functionResponse").value.id')))
  WHERE jsonb_path_exists(event_data,
    '$.content.parts[*] ? (exists(@.function_response) || exists(@.functionResponse))');
-- adksession_events_invocation: the first event of an invocation (the one a
-- rewind rewinds to).
CREATE INDEX IF NOT EXISTS adksession_events_invocation
  ON events (app_name, user_id, session_id, invocation_id, "timestamp");
