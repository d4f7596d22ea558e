-- ADK's v1 DatabaseSessionService schema as ADK Python's SQLAlchemy models
-- create it on SQLite: JSON in TEXT, times in DATETIME columns holding
-- 'YYYY-MM-DD HH:MM:SS.ffffff' UTC text (docs/persistence.md). Every statement
-- is idempotent, so a database that ADK Python created is adopted as it is.
CREATE TABLE IF NOT EXISTS adk_internal_metadata (
  key   VARCHAR(255) NOT NULL,
  value VARCHAR(255) NOT NULL,
  PRIMARY KEY (key)
);
CREATE TABLE IF NOT EXISTS app_states (
  app_name    VARCHAR(191) NOT NULL,
  state       TEXT         NOT NULL,
  update_time DATETIME     NOT NULL,
  PRIMARY KEY (app_name)
);
CREATE TABLE IF NOT EXISTS user_states (
  app_name    VARCHAR(191) NOT NULL,
  user_id     VARCHAR(191) NOT NULL,
  state       TEXT         NOT NULL,
  update_time DATETIME     NOT NULL,
  PRIMARY KEY (app_name, user_id)
);
CREATE TABLE IF NOT EXISTS sessions (
  app_name    VARCHAR(191) NOT NULL,
  user_id     VARCHAR(191) NOT NULL,
  id          VARCHAR(191) NOT NULL,
  state       TEXT         NOT NULL,
  create_time DATETIME     NOT NULL,
  update_time DATETIME     NOT NULL,
  PRIMARY KEY (app_name, user_id, id)
);
CREATE TABLE IF NOT EXISTS events (
  id            VARCHAR(191) NOT NULL,
  app_name      VARCHAR(191) NOT NULL,
  user_id       VARCHAR(191) NOT NULL,
  session_id    VARCHAR(191) NOT NULL,
  invocation_id VARCHAR(255) NOT NULL,
  timestamp     DATETIME     NOT NULL,
  event_data    TEXT         NOT NULL,
  PRIMARY KEY (id, app_name, user_id, session_id)
);
CREATE INDEX IF NOT EXISTS idx_events_app_user_session_ts
  ON events (app_name, user_id, session_id, timestamp DESC);
INSERT INTO adk_internal_metadata (key, value) VALUES ('schema_version', '1')
  ON CONFLICT (key) DO NOTHING;

-- Events are deleted with their session, whether or not the connection has
-- foreign keys enabled.
CREATE TRIGGER IF NOT EXISTS sessions_delete_events AFTER DELETE ON sessions
BEGIN
  DELETE FROM events
   WHERE app_name = OLD.app_name AND user_id = OLD.user_id AND session_id = OLD.id;
END;
