-- adksession_sessions.create_state: the session-scoped state a session was
-- created with (a JSON object), written by the flusher from the create, so
-- that a rewind computed from the database restores it (docs/persistence.md).
-- NULL when unknown: sessions written before this migration, or by ADK.
ALTER TABLE adksession_sessions ADD COLUMN create_state TEXT;
