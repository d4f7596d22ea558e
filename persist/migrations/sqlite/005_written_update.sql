-- adksession_sessions.written_update: the update_time (µs since the epoch)
-- that adksession last wrote into the session's sessions row. A sessions row
-- whose update_time differs was written by someone else since (ADK Python or
-- ADK JS appending to the session: side-by-side use, or a rollback): the
-- flusher then appends after the rows it finds instead of numbering over
-- them, and readers count the events rather than trust rev
-- (docs/design.md, "Redis behind the database"). NULL: unknown (rows
-- written before this migration), taken as ours.
ALTER TABLE adksession_sessions ADD COLUMN written_update BIGINT;
