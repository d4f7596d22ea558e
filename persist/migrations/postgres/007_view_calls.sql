-- 006's call indexes took the keys of every part of an event's
-- content.parts, and jsonpath's keyvalue() raises an error on a part that is
-- no object: an event with a function call and such a part (an older
-- adksession acknowledged it; an operator or another writer may write one)
-- could not be inserted while the index stood, and its batch never
-- committed. These read the objects only; the rest of the value is as 006
-- had it (persist's callIDs and answerIDs spell them as these do).
DROP INDEX IF EXISTS adksession_events_calls;
CREATE INDEX adksession_events_calls
  ON events USING gin ((jsonb_path_query_array(event_data,
    '$.content.parts[*] ? (@.type() == "object").keyvalue() ? (@.key == "function_call" || @.key == "functionCall").value.id')))
  WHERE jsonb_path_exists(event_data,
    '$.content.parts[*] ? (exists(@.function_call) || exists(@.functionCall))');
DROP INDEX IF EXISTS adksession_events_answers;
CREATE INDEX adksession_events_answers
  ON events USING gin ((jsonb_path_query_array(event_data,
    '$.content.parts[*] ? (@.type() == "object").keyvalue() ? (@.key == "function_response" || @.key == "functionResponse").value.id')))
  WHERE jsonb_path_exists(event_data,
    '$.content.parts[*] ? (exists(@.function_response) || exists(@.functionResponse))');
