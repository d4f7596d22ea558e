-- The compacted view's lookups on SQLite (docs/persistence.md, "The
-- compacted view in SQL"), what Postgres's 006 indexes are there: a compacted
-- Get of a session Redis lost reads the events its view needs by index, not
-- the whole history. They cover every row, those ADK Python and ADK JS write
-- too: the expression indexes by their predicates, the call ids by triggers
-- on events, which fire for every writer. A row whose event_data is not JSON
-- is left out (and still written).
--
-- adksession_events_marked: the events every compacted view reads (ADK
-- Python's actions.compaction, ADK JS's is_compacted, a rewind, an isolation
-- scope), by time; persist.sqliteMarked spells the predicate as this does,
-- so that its queries are answered from the index.
CREATE INDEX IF NOT EXISTS adksession_events_marked
  ON events (app_name, user_id, session_id, "timestamp")
  WHERE CASE WHEN json_valid(event_data) THEN
      json_type(event_data, '$.actions.compaction') IS NOT NULL
   OR json_type(event_data, '$.actions.rewind_before_invocation_id') IS NOT NULL
   OR json_type(event_data, '$.actions.rewindBeforeInvocationId') IS NOT NULL
   OR json_type(event_data, '$.is_compacted') IS NOT NULL
   OR json_type(event_data, '$.isCompacted') IS NOT NULL
   OR json_type(event_data, '$.isolation_scope') IS NOT NULL
   OR json_type(event_data, '$.isolationScope') IS NOT NULL END;
-- adksession_events_invocation: the first event of an invocation (the one a
-- rewind rewinds to).
CREATE INDEX IF NOT EXISTS adksession_events_invocation
  ON events (app_name, user_id, session_id, invocation_id, "timestamp");
-- adksession_event_calls: the function call ids an event calls (answer 0)
-- or answers (answer 1), a row per id: SQLite indexes no JSON array's
-- elements, so the triggers below keep them, as Postgres's GIN indexes
-- adksession_events_calls and adksession_events_answers do. A part is an
-- object of the content's parts array; its function_call / functionCall
-- (function_response / functionResponse) member's string id is the call id.
CREATE TABLE IF NOT EXISTS adksession_event_calls (
  app_name   VARCHAR(191) NOT NULL,
  user_id    VARCHAR(191) NOT NULL,
  session_id VARCHAR(191) NOT NULL,
  answer     INTEGER      NOT NULL,
  call_id    TEXT         NOT NULL,
  event_id   VARCHAR(191) NOT NULL,
  PRIMARY KEY (app_name, user_id, session_id, answer, call_id, event_id)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS adksession_event_calls_event
  ON adksession_event_calls (app_name, user_id, session_id, event_id);
-- adksession_event_call_ids: those rows, computed from events (the
-- triggers read it for one event, by events' primary key).
CREATE VIEW IF NOT EXISTS adksession_event_call_ids AS
SELECT e.app_name, e.user_id, e.session_id,
       kv.key IN ('function_response', 'functionResponse') AS answer, kv.value ->> '$.id' AS call_id, e.id AS event_id
  FROM events AS e,
       json_each(CASE WHEN NOT json_valid(e.event_data) THEN '{}'
                      WHEN json_type(e.event_data, '$.content.parts') = 'array' THEN e.event_data
                      ELSE '{}' END, '$.content.parts') AS p,
       json_each(CASE WHEN p.type = 'object' THEN p.value ELSE '{}' END) AS kv
 WHERE kv.key IN ('function_call', 'functionCall', 'function_response', 'functionResponse')
   AND CASE WHEN kv.type = 'object' THEN json_type(kv.value, '$.id') END = 'text';
CREATE TRIGGER IF NOT EXISTS adksession_event_calls_insert AFTER INSERT ON events
BEGIN
  INSERT OR IGNORE INTO adksession_event_calls SELECT * FROM adksession_event_call_ids
   WHERE event_id = NEW.id AND app_name = NEW.app_name AND user_id = NEW.user_id AND session_id = NEW.session_id;
END;
CREATE TRIGGER IF NOT EXISTS adksession_event_calls_delete AFTER DELETE ON events
BEGIN
  DELETE FROM adksession_event_calls
   WHERE app_name = OLD.app_name AND user_id = OLD.user_id AND session_id = OLD.session_id AND event_id = OLD.id;
END;
-- An update (no writer updates events today; an operator might) is a delete
-- and an insert.
CREATE TRIGGER IF NOT EXISTS adksession_event_calls_update AFTER UPDATE OF id, app_name, user_id, session_id, event_data ON events
BEGIN
  DELETE FROM adksession_event_calls
   WHERE app_name = OLD.app_name AND user_id = OLD.user_id AND session_id = OLD.session_id AND event_id = OLD.id;
  INSERT OR IGNORE INTO adksession_event_calls SELECT * FROM adksession_event_call_ids
   WHERE event_id = NEW.id AND app_name = NEW.app_name AND user_id = NEW.user_id AND session_id = NEW.session_id;
END;
-- The rows written before this migration.
INSERT OR IGNORE INTO adksession_event_calls SELECT * FROM adksession_event_call_ids;
