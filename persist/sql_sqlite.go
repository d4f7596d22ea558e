package persist

// sqlite binds all columns as one JSON array of rows and reads it back with
// json_each; value->>i is the i-th column of a row. Writes need no locks:
// every write transaction begins IMMEDIATE on the single writer connection,
// which serializes writers across processes too. (The WHERE true in
// INSERT ... SELECT ... ON CONFLICT is SQLite's required disambiguation.)
var sqlite = &dialect{
	name:        "sqlite",
	bindDriver:  "sqlite3",
	bind:        bindJSONRows,
	noLimit:     -1,
	byteOrder:   ` COLLATE BINARY`,
	pairs:       `(SELECT value->>0 AS user_id, value->>1 AS id FROM json_each($2)) AS k`,
	migrations:  "migrations/sqlite",
	tableExists: `SELECT EXISTS (SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = $1)`,
	viewQuery:   sqliteViewQuery,
	q: batchQueries{
		readSessions: `SELECT t.app_name, t.user_id, t.session_id, t.incarnation, t.rev, t.deleted, t.written_update, s.update_time
FROM json_each($1) AS k
JOIN adksession_sessions AS t
  ON t.app_name = k.value->>0 AND t.user_id = k.value->>1 AND t.session_id = k.value->>2
LEFT JOIN sessions AS s ON s.app_name = t.app_name AND s.user_id = t.user_id AND s.id = t.session_id`,
		readStates: `SELECT t.app_name, t.user_id, t.rev, COALESCE(t.flushes, 0)
FROM json_each($1) AS k
JOIN adksession_states AS t ON t.app_name = k.value->>0 AND t.user_id = k.value->>1`,
		purgeSessions: `DELETE FROM sessions WHERE (app_name, user_id, id) IN (
  SELECT value->>0, value->>1, value->>2 FROM json_each($1))`,
		upsertSessions: `INSERT INTO sessions (app_name, user_id, id, state, create_time, update_time)
SELECT value->>0, value->>1, value->>2, value->>3, value->>4, value->>5 FROM json_each($1) WHERE true
ON CONFLICT (app_name, user_id, id) DO UPDATE
SET state = excluded.state, create_time = excluded.create_time, update_time = excluded.update_time`,
		insertEvents: `INSERT INTO events (app_name, user_id, session_id, id, invocation_id, "timestamp", event_data)
SELECT value->>0, value->>1, value->>2, value->>3, value->>4, value->>5, value->>6 FROM json_each($1) WHERE true
ON CONFLICT DO NOTHING`,
		trackSessions: `INSERT INTO adksession_sessions (app_name, user_id, session_id, create_state, incarnation, rev, deleted, written_update)
SELECT value->>0, value->>1, value->>2, NULLIF(value->>3, ''), value->>4, value->>5, value->>6, NULLIF(value->>7, -1) FROM json_each($1) WHERE true
ON CONFLICT (app_name, user_id, session_id) DO UPDATE
SET incarnation = excluded.incarnation, rev = excluded.rev, deleted = excluded.deleted, ` + setWrittenUpdate + `, ` + setCreateState,
		ensureAppStates: `INSERT INTO app_states (app_name, state, update_time)
SELECT value->>0, '{}', value->>1 FROM json_each($1) WHERE true
ON CONFLICT DO NOTHING`,
		upsertAppStates: `INSERT INTO app_states (app_name, state, update_time)
SELECT value->>0, value->>1, value->>2 FROM json_each($1) WHERE true
ON CONFLICT (app_name) DO UPDATE SET state = excluded.state, update_time = excluded.update_time`,
		ensureUserStates: `INSERT INTO user_states (app_name, user_id, state, update_time)
SELECT value->>0, value->>1, '{}', value->>2 FROM json_each($1) WHERE true
ON CONFLICT DO NOTHING`,
		upsertUserStates: `INSERT INTO user_states (app_name, user_id, state, update_time)
SELECT value->>0, value->>1, value->>2, value->>3 FROM json_each($1) WHERE true
ON CONFLICT (app_name, user_id) DO UPDATE SET state = excluded.state, update_time = excluded.update_time`,
		trackStates: `INSERT INTO adksession_states (app_name, user_id, rev, flushes, orders)
SELECT value->>0, value->>1, value->>2, value->>3, NULLIF(value->>4, '') FROM json_each($1) WHERE true
ON CONFLICT (app_name, user_id) DO UPDATE
SET rev = excluded.rev, flushes = MAX(COALESCE(adksession_states.flushes, 0), excluded.flushes),
  orders = COALESCE(excluded.orders, adksession_states.orders)`,
	},
}
