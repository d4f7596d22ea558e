-- adksession_sessions.written_update: the update_time (µs since the epoch)
-- that adksession last wrote into the session's sessions row. A sessions row
-- whose update_time differs was written by someone else since (ADK Python or
-- ADK JS appending to the session: side-by-side use, or a rollback): the
-- flusher then appends after the rows it finds instead of numbering over
-- them, and readers count the events rather than trust rev
-- (docs/design.md, "Redis behind the database"). NULL: unknown (rows
-- written before this migration), taken as ours.
ALTER TABLE adksession_sessions ADD COLUMN written_update BIGINT;
-- adksession_states.flushes: how many times the flusher had read the state's
-- Redis hash when it wrote the row (m:fc, counted by state_read.lua in the
-- same step as the read). Redis counts first, so its count is never below
-- the database's unless Redis came back holding an older copy of the hash:
-- then the row is written as the database's state plus the batch's new
-- deltas (docs/design.md, "Redis behind the database"). NULL: unknown.
ALTER TABLE adksession_states ADD COLUMN flushes BIGINT;
-- adksession_states.orders: for an app's row, the order number (app_order.lua)
-- of the change that last wrote each key, a JSON object. The flusher merges
-- an app's Redis state into the row key by key: a key is written only when
-- Redis's number for it is higher, so a Redis holding an older copy of the
-- app's hash never puts older values back (docs/design.md, "Redis behind the
-- database"). NULL: unknown (rows written before this migration).
ALTER TABLE adksession_states ADD COLUMN orders TEXT;
-- adksession_namespaces: the Redis namespaces (Config.Namespace) that opened
-- this database, and when each last did. One database is meant for one
-- namespace: two are two caches of the same sessions, whose writes to one
-- session the flusher rebases but does not coordinate. Open warns when
-- another namespace opened the database within a day (docs/operations.md).
CREATE TABLE IF NOT EXISTS adksession_namespaces (
  namespace varchar(255) NOT NULL,
  last_seen DATETIME    NOT NULL,
  CONSTRAINT adksession_namespaces_pkey PRIMARY KEY (namespace)
);
