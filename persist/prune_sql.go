package persist

// pruneQueries are the statements of the prune (prune.go) that differ
// between Postgres and SQLite. Keys travel as in Apply's statements: arrays
// read with unnest on Postgres, one JSON array of rows read with json_each
// on SQLite. The walk over the sessions (pruneCandidates) is built from
// the primary key's column order (sessionsKeyOrder).
type pruneQueries struct {
	// primaryKey returns the column names of the sessions primary key, in
	// order.
	primaryKey string
	// recheck reads the sessions named by $1.. into rechecked rows: key,
	// update time, bookkeeping (incarnation, rev, deleted; NULL when
	// untracked) and the size of the state column.
	recheck string
	// eventSizes counts the events of the sessions named (events) and the
	// size of their event_data (bytes).
	eventSizes string
	// untrack deletes the bookkeeping rows of the sessions named.
	untrack string
	// sessionlessUsers returns the (app, user) pairs named, and
	// sessionlessApps the apps named, that have no session updated at or
	// after the time in the last parameter, with the revision of their
	// state row (0: untracked), as StateRef rows.
	sessionlessUsers, sessionlessApps string
	// dropStates deletes the app_states (user "") and user_states rows
	// named, and dropStateRevs their bookkeeping.
	dropAppStates, dropUserStates, dropStateRevs string
	// stampTombstones and purgeTombstones act on the bookkeeping rows
	// named: stamp those deleted and not stamped for their incarnation with
	// the time in the last parameter; purge those stamped for their
	// incarnation before it. The time parameter follows the bound columns:
	// $4 on Postgres, $2 on SQLite.
	stampTombstones, purgeTombstones string
}

var prunePostgres = pruneQueries{
	primaryKey: `SELECT a.attname FROM pg_index AS i
JOIN pg_attribute AS a ON a.attrelid = i.indrelid AND a.attnum = ANY (i.indkey)
WHERE i.indrelid = 'sessions'::regclass AND i.indisprimary
ORDER BY array_position(i.indkey::int2[], a.attnum)`,
	recheck: `SELECT s.app_name, s.user_id, s.id AS session_id, s.update_time, t.incarnation, t.rev, t.deleted,
  pg_column_size(s.state) AS state_bytes
FROM unnest($1::text[], $2::text[], $3::text[]) AS k(app_name, user_id, id)
JOIN sessions AS s ON s.app_name = k.app_name AND s.user_id = k.user_id AND s.id = k.id
LEFT JOIN adksession_sessions AS t ON t.app_name = s.app_name AND t.user_id = s.user_id AND t.session_id = s.id`,
	eventSizes: `SELECT count(*) AS events, COALESCE(sum(pg_column_size(e.event_data)), 0) AS bytes
FROM unnest($1::text[], $2::text[], $3::text[]) AS k(app_name, user_id, id)
JOIN events AS e ON e.app_name = k.app_name AND e.user_id = k.user_id AND e.session_id = k.id`,
	untrack: `DELETE FROM adksession_sessions AS t
USING unnest($1::text[], $2::text[], $3::text[]) AS k(app_name, user_id, id)
WHERE t.app_name = k.app_name AND t.user_id = k.user_id AND t.session_id = k.id`,
	sessionlessUsers: `SELECT k.app_name, k.user_id, COALESCE(t.rev, 0) AS rev
FROM unnest($1::text[], $2::text[]) AS k(app_name, user_id)
LEFT JOIN adksession_states AS t ON t.app_name = k.app_name AND t.user_id = k.user_id
WHERE NOT EXISTS (SELECT 1 FROM sessions AS s
  WHERE s.app_name = k.app_name AND s.user_id = k.user_id AND s.update_time >= $3::timestamp)`,
	sessionlessApps: `SELECT k.app_name, '' AS user_id, COALESCE(t.rev, 0) AS rev
FROM unnest($1::text[]) AS k(app_name)
LEFT JOIN adksession_states AS t ON t.app_name = k.app_name AND t.user_id = ''
WHERE NOT EXISTS (SELECT 1 FROM sessions AS s WHERE s.app_name = k.app_name AND s.update_time >= $2::timestamp)`,
	dropAppStates: `DELETE FROM app_states AS a USING unnest($1::text[]) AS k(app_name)
WHERE a.app_name = k.app_name`,
	dropUserStates: `DELETE FROM user_states AS u USING unnest($1::text[], $2::text[]) AS k(app_name, user_id)
WHERE u.app_name = k.app_name AND u.user_id = k.user_id`,
	dropStateRevs: `DELETE FROM adksession_states AS t USING unnest($1::text[], $2::text[]) AS k(app_name, user_id)
WHERE t.app_name = k.app_name AND t.user_id = k.user_id`,
	stampTombstones: `UPDATE adksession_sessions AS t SET tombstone_seen = $4::timestamp, tombstone_inc = t.incarnation
FROM unnest($1::text[], $2::text[], $3::text[]) AS k(app_name, user_id, id)
WHERE t.app_name = k.app_name AND t.user_id = k.user_id AND t.session_id = k.id
  AND t.deleted AND (t.tombstone_inc IS NULL OR t.tombstone_inc <> t.incarnation)`,
	purgeTombstones: `DELETE FROM adksession_sessions AS t
USING unnest($1::text[], $2::text[], $3::text[]) AS k(app_name, user_id, id)
WHERE t.app_name = k.app_name AND t.user_id = k.user_id AND t.session_id = k.id
  AND t.deleted AND t.tombstone_inc = t.incarnation AND t.tombstone_seen < $4::timestamp`,
}

var pruneSQLite = pruneQueries{
	primaryKey: `SELECT name FROM pragma_table_info('sessions') WHERE pk > 0 ORDER BY pk`,
	recheck: `SELECT s.app_name, s.user_id, s.id AS session_id, s.update_time, t.incarnation, t.rev, t.deleted,
  length(s.state) AS state_bytes
FROM json_each($1) AS k
JOIN sessions AS s ON s.app_name = k.value->>0 AND s.user_id = k.value->>1 AND s.id = k.value->>2
LEFT JOIN adksession_sessions AS t ON t.app_name = s.app_name AND t.user_id = s.user_id AND t.session_id = s.id`,
	eventSizes: `SELECT count(*) AS events, COALESCE(sum(length(e.event_data)), 0) AS bytes
FROM json_each($1) AS k
JOIN events AS e ON e.app_name = k.value->>0 AND e.user_id = k.value->>1 AND e.session_id = k.value->>2`,
	untrack: `DELETE FROM adksession_sessions WHERE (app_name, user_id, session_id) IN (
  SELECT value->>0, value->>1, value->>2 FROM json_each($1))`,
	sessionlessUsers: `SELECT k.value->>0 AS app_name, k.value->>1 AS user_id, COALESCE(t.rev, 0) AS rev
FROM json_each($1) AS k
LEFT JOIN adksession_states AS t ON t.app_name = k.value->>0 AND t.user_id = k.value->>1
WHERE NOT EXISTS (SELECT 1 FROM sessions AS s
  WHERE s.app_name = k.value->>0 AND s.user_id = k.value->>1 AND s.update_time >= $2)`,
	sessionlessApps: `SELECT k.value->>0 AS app_name, '' AS user_id, COALESCE(t.rev, 0) AS rev
FROM json_each($1) AS k
LEFT JOIN adksession_states AS t ON t.app_name = k.value->>0 AND t.user_id = ''
WHERE NOT EXISTS (SELECT 1 FROM sessions AS s WHERE s.app_name = k.value->>0 AND s.update_time >= $2)`,
	dropAppStates: `DELETE FROM app_states WHERE app_name IN (SELECT value->>0 FROM json_each($1))`,
	dropUserStates: `DELETE FROM user_states WHERE (app_name, user_id) IN (
  SELECT value->>0, value->>1 FROM json_each($1))`,
	dropStateRevs: `DELETE FROM adksession_states WHERE (app_name, user_id) IN (
  SELECT value->>0, value->>1 FROM json_each($1))`,
	stampTombstones: `UPDATE adksession_sessions SET tombstone_seen = $2, tombstone_inc = incarnation
WHERE (app_name, user_id, session_id) IN (SELECT value->>0, value->>1, value->>2 FROM json_each($1))
  AND deleted AND (tombstone_inc IS NULL OR tombstone_inc <> incarnation)`,
	purgeTombstones: `DELETE FROM adksession_sessions
WHERE (app_name, user_id, session_id) IN (SELECT value->>0, value->>1, value->>2 FROM json_each($1))
  AND deleted AND tombstone_inc = incarnation AND tombstone_seen < $2`,
}
