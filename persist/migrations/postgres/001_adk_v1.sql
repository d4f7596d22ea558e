-- ADK's v1 DatabaseSessionService schema, in the shape that ADK Python and
-- ADK JS 2.0.0 both read (see docs/persistence.md). Every statement is
-- idempotent, so a database that ADK Python or ADK JS created is adopted as
-- it is: its tables, keys and column types are left alone.
CREATE TABLE IF NOT EXISTS adk_internal_metadata (
  key   varchar(255) NOT NULL,
  value varchar(255) NOT NULL,
  CONSTRAINT adk_internal_metadata_pkey PRIMARY KEY (key)
);
CREATE TABLE IF NOT EXISTS app_states (
  app_name    varchar(191) NOT NULL,
  state       jsonb        NOT NULL,
  update_time timestamp    NOT NULL,
  CONSTRAINT app_states_pkey PRIMARY KEY (app_name)
);
CREATE TABLE IF NOT EXISTS user_states (
  app_name    varchar(191) NOT NULL,
  user_id     varchar(191) NOT NULL,
  state       jsonb        NOT NULL,
  update_time timestamp    NOT NULL,
  CONSTRAINT user_states_pkey PRIMARY KEY (app_name, user_id)
);
CREATE TABLE IF NOT EXISTS sessions (
  id          varchar(191) NOT NULL,
  app_name    varchar(191) NOT NULL,
  user_id     varchar(191) NOT NULL,
  state       jsonb        NOT NULL,
  create_time timestamp    NOT NULL,
  update_time timestamp    NOT NULL,
  CONSTRAINT sessions_pkey PRIMARY KEY (id, app_name, user_id)
);
CREATE TABLE IF NOT EXISTS events (
  id            varchar(191) NOT NULL,
  app_name      varchar(191) NOT NULL,
  user_id       varchar(191) NOT NULL,
  session_id    varchar(191) NOT NULL,
  invocation_id varchar(255) NOT NULL,
  "timestamp"   timestamp    NOT NULL,
  event_data    jsonb        NOT NULL,
  CONSTRAINT events_pkey PRIMARY KEY (id, app_name, user_id, session_id)
);
CREATE INDEX IF NOT EXISTS idx_events_app_user_session_ts
  ON events (app_name, user_id, session_id, "timestamp" DESC);
INSERT INTO adk_internal_metadata (key, value) VALUES ('schema_version', '1')
  ON CONFLICT (key) DO NOTHING;

-- Events are deleted with their session. ADK Python declares a foreign key
-- with ON DELETE CASCADE; ADK JS drops foreign keys on start but leaves this
-- trigger alone.
CREATE OR REPLACE FUNCTION adk_delete_session_events() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
  DELETE FROM events
   WHERE app_name = OLD.app_name AND user_id = OLD.user_id AND session_id = OLD.id;
  RETURN OLD;
END $$;
DROP TRIGGER IF EXISTS sessions_delete_events ON sessions;
CREATE TRIGGER sessions_delete_events AFTER DELETE ON sessions
  FOR EACH ROW EXECUTE FUNCTION adk_delete_session_events();
