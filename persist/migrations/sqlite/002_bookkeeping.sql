-- adksession's own bookkeeping, in tables that ADK ignores (docs/persistence.md).
-- adksession_sessions: the incarnation and revision of each session id that
-- Apply has written, and whether it was deleted (a tombstone, so that a
-- replayed old batch cannot bring it back).
CREATE TABLE IF NOT EXISTS adksession_sessions (
  app_name    VARCHAR(191) NOT NULL,
  user_id     VARCHAR(191) NOT NULL,
  session_id  VARCHAR(191) NOT NULL,
  incarnation BIGINT       NOT NULL,
  rev         BIGINT       NOT NULL,
  deleted     BOOLEAN      NOT NULL,
  PRIMARY KEY (app_name, user_id, session_id)
);
-- adksession_states: the revision of each app_states (user_id = '') and
-- user_states row that Apply has written.
CREATE TABLE IF NOT EXISTS adksession_states (
  app_name VARCHAR(191) NOT NULL,
  user_id  VARCHAR(191) NOT NULL,
  rev      BIGINT       NOT NULL,
  PRIMARY KEY (app_name, user_id)
);
