package persist

// postgres binds every column as an array and reads it back with unnest,
// except JSON columns: each is one JSON array, read back with
// jsonb_array_elements and joined to the other columns by ordinality
// (parsing a jsonb[] array literal costs several times more). Timestamps
// travel as UTC text and are cast to timestamp; the session time zone is UTC
// (see openPostgres), so timestamptz columns get the same instant.
var postgres = &dialect{
	name:       "postgres",
	jsonb:      true,
	bindDriver: "postgres",
	bind:       bindArrays,
	noLimit:    nil, // LIMIT NULL
	byteOrder:  ` COLLATE "C"`,
	pairs:      `unnest($2::text[], $3::text[]) AS k(user_id, id)`,
	migrations: "migrations/postgres",
	forUpdate:  ` FOR NO KEY UPDATE`,
	viewQuery:  postgresViewQuery,
	tableExists: `SELECT EXISTS (SELECT 1 FROM information_schema.tables
  WHERE table_schema = current_schema() AND table_name = $1)`,
	q: batchQueries{
		lockMigrations: `SELECT pg_advisory_xact_lock(hashtextextended('adksession migrate', 0))`,
		// One transaction-scoped advisory lock per session key (and per
		// app/user whose state the batch writes), taken in hash order by one
		// statement: batches touching the same key serialize, others run in
		// parallel, and two batches cannot deadlock.
		lockKeys: `SELECT pg_advisory_xact_lock(h) FROM (
  SELECT DISTINCT hashtextextended(k, 0) AS h FROM unnest($1::text[]) AS k ORDER BY h
) AS l`,
		// The sessions rows of the batch's keys, locked in key order
		// before their bookkeeping is read: a writer the advisory locks do
		// not hold off (ADK's append: its events row, then UPDATE sessions)
		// either commits before the read, which then sees its update_time,
		// or waits for the batch's commit (docs/design.md, "Redis behind
		// the database"). NO KEY UPDATE is the lock the batch's upsert takes
		// anyway; it does not block the KEY SHARE of an events insert.
		lockSessions: `SELECT count(*) FROM (SELECT 1 FROM sessions AS s
JOIN unnest($1::text[], $2::text[], $3::text[]) AS k(app_name, user_id, id)
  ON s.app_name = k.app_name AND s.user_id = k.user_id AND s.id = k.id
ORDER BY s.app_name, s.user_id, s.id FOR NO KEY UPDATE OF s) AS l`,
		readSessions: `SELECT t.app_name, t.user_id, t.session_id, t.incarnation, t.rev, t.deleted, t.written_update, s.update_time
FROM adksession_sessions AS t
JOIN unnest($1::text[], $2::text[], $3::text[]) AS k(app_name, user_id, session_id)
  ON t.app_name = k.app_name AND t.user_id = k.user_id AND t.session_id = k.session_id
LEFT JOIN sessions AS s ON s.app_name = t.app_name AND s.user_id = t.user_id AND s.id = t.session_id`,
		readStates: `SELECT t.app_name, t.user_id, t.rev, COALESCE(t.flushes, 0)
FROM adksession_states AS t
JOIN unnest($1::text[], $2::text[]) AS k(app_name, user_id)
  ON t.app_name = k.app_name AND t.user_id = k.user_id`,
		purgeSessions: `DELETE FROM sessions AS s
USING unnest($1::text[], $2::text[], $3::text[]) AS k(app_name, user_id, id)
WHERE s.app_name = k.app_name AND s.user_id = k.user_id AND s.id = k.id`,
		upsertSessions: `INSERT INTO sessions (app_name, user_id, id, state, create_time, update_time)
SELECT k.app_name, k.user_id, k.id, j.value, k.create_time, k.update_time
FROM unnest($1::text[], $2::text[], $3::text[], $5::timestamp[], $6::timestamp[])
  WITH ORDINALITY AS k(app_name, user_id, id, create_time, update_time, n)
JOIN jsonb_array_elements($4::jsonb) WITH ORDINALITY AS j(value, n) ON j.n = k.n
ON CONFLICT (app_name, user_id, id) DO UPDATE
SET state = EXCLUDED.state, create_time = EXCLUDED.create_time, update_time = EXCLUDED.update_time`,
		insertEvents: `INSERT INTO events (app_name, user_id, session_id, id, invocation_id, "timestamp", event_data)
SELECT k.app_name, k.user_id, k.session_id, k.id, k.invocation_id, k.ts, j.value
FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $6::timestamp[])
  WITH ORDINALITY AS k(app_name, user_id, session_id, id, invocation_id, ts, n)
JOIN jsonb_array_elements($7::jsonb) WITH ORDINALITY AS j(value, n) ON j.n = k.n
ON CONFLICT DO NOTHING`,
		trackSessions: `INSERT INTO adksession_sessions (app_name, user_id, session_id, create_state, incarnation, rev, deleted, written_update)
SELECT k.app_name, k.user_id, k.session_id, NULLIF(k.create_state, '')::jsonb, k.incarnation, k.rev, k.deleted, NULLIF(k.written_update, -1)
FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::bigint[], $6::bigint[], $7::boolean[], $8::bigint[])
  AS k(app_name, user_id, session_id, create_state, incarnation, rev, deleted, written_update)
ON CONFLICT (app_name, user_id, session_id) DO UPDATE
SET incarnation = EXCLUDED.incarnation, rev = EXCLUDED.rev, deleted = EXCLUDED.deleted, ` + setWrittenUpdate + `, ` + setCreateState,
		ensureAppStates: `INSERT INTO app_states (app_name, state, update_time)
SELECT k.app_name, '{}', k.update_time FROM unnest($1::text[], $2::timestamp[]) AS k(app_name, update_time)
ON CONFLICT DO NOTHING`,
		upsertAppStates: `INSERT INTO app_states (app_name, state, update_time)
SELECT k.app_name, j.value, k.update_time
FROM unnest($1::text[], $3::timestamp[]) WITH ORDINALITY AS k(app_name, update_time, n)
JOIN jsonb_array_elements($2::jsonb) WITH ORDINALITY AS j(value, n) ON j.n = k.n
ON CONFLICT (app_name) DO UPDATE SET state = EXCLUDED.state, update_time = EXCLUDED.update_time`,
		ensureUserStates: `INSERT INTO user_states (app_name, user_id, state, update_time)
SELECT k.app_name, k.user_id, '{}', k.update_time
FROM unnest($1::text[], $2::text[], $3::timestamp[]) AS k(app_name, user_id, update_time)
ON CONFLICT DO NOTHING`,
		upsertUserStates: `INSERT INTO user_states (app_name, user_id, state, update_time)
SELECT k.app_name, k.user_id, j.value, k.update_time
FROM unnest($1::text[], $2::text[], $4::timestamp[]) WITH ORDINALITY AS k(app_name, user_id, update_time, n)
JOIN jsonb_array_elements($3::jsonb) WITH ORDINALITY AS j(value, n) ON j.n = k.n
ON CONFLICT (app_name, user_id) DO UPDATE SET state = EXCLUDED.state, update_time = EXCLUDED.update_time`,
		trackStates: `INSERT INTO adksession_states (app_name, user_id, rev, flushes, orders)
SELECT k.app_name, k.user_id, k.rev, k.flushes, NULLIF(k.orders, '')::jsonb
FROM unnest($1::text[], $2::text[], $3::bigint[], $4::bigint[], $5::text[]) AS k(app_name, user_id, rev, flushes, orders)
ON CONFLICT (app_name, user_id) DO UPDATE
SET rev = EXCLUDED.rev, flushes = GREATEST(adksession_states.flushes, EXCLUDED.flushes),
  orders = COALESCE(EXCLUDED.orders, adksession_states.orders)`,
	},
}
