-- adksession's own bookkeeping, in tables that ADK ignores (docs/persistence.md).
-- adksession_sessions: the incarnation and revision of each session id that
-- Apply has written, and whether it was deleted (a tombstone, so that a
-- replayed old batch cannot bring it back).
CREATE TABLE IF NOT EXISTS adksession_sessions (
  app_name    varchar(191) NOT NULL,
  user_id     varchar(191) NOT NULL,
  session_id  varchar(191) NOT NULL,
  incarnation bigint       NOT NULL,
  rev         bigint       NOT NULL,
  deleted     boolean      NOT NULL,
  CONSTRAINT adksession_sessions_pkey PRIMARY KEY (app_name, user_id, session_id)
);
-- adksession_states: the revision of each app_states (user_id = '') and
-- user_states row that Apply has written.
CREATE TABLE IF NOT EXISTS adksession_states (
  app_name varchar(191) NOT NULL,
  user_id  varchar(191) NOT NULL,
  rev      bigint       NOT NULL,
  CONSTRAINT adksession_states_pkey PRIMARY KEY (app_name, user_id)
);
