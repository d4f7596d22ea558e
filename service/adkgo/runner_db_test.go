package adkgo

import (
	"database/sql"
	"testing"

	_ "github.com/lib/pq"
	"github.com/stretchr/testify/require"

	"github.com/adksession/adksession/integration/testenv"
	"github.com/adksession/adksession/service"
)

// TestRunnerEndToEndPostgres runs the runner scenario with Postgres behind
// Redis, then checks that the rows landed in ADK's schema.
func TestRunnerEndToEndPostgres(t *testing.T) {
	ctx := t.Context()
	dbURL := testenv.FreshDatabase(t)
	require.NoError(t, service.Migrate(ctx, dbURL))
	cfg := service.Config{RedisURL: testenv.RedisURL(t), DatabaseURL: dbURL, Namespace: testenv.UniqueName(t, "adkgo-pg-")}
	runnerEndToEnd(t, cfg)

	svc := openService(t, cfg)
	require.NoError(t, svc.Flush(ctx))
	db, err := sql.Open("postgres", dbURL)
	require.NoError(t, err)
	defer db.Close()

	var events int
	require.NoError(t, db.QueryRowContext(ctx, `SELECT count(*) FROM events WHERE app_name = 'counter-app'`).Scan(&events))
	require.Equal(t, 12, events, "4 turns of 3 events")
	var sessions int
	require.NoError(t, db.QueryRowContext(ctx, `SELECT count(*) FROM sessions WHERE app_name = 'counter-app'`).Scan(&sessions))
	require.Equal(t, 3, sessions, "the runner's session and the two created to check scopes")
	var state, user, app string
	require.NoError(t, db.QueryRowContext(ctx, `SELECT s.state::text FROM sessions s JOIN events e ON e.session_id = s.id GROUP BY s.id, s.state`).Scan(&state))
	require.JSONEq(t, `{"count": 4, "last_message": "hello 4", "seen_scratch": "turn-4"}`, state)
	require.NoError(t, db.QueryRowContext(ctx, `SELECT state::text FROM user_states WHERE app_name = 'counter-app' AND user_id = 'u1'`).Scan(&user))
	require.JSONEq(t, `{"name": "ada", "visits": 4}`, user)
	require.NoError(t, db.QueryRowContext(ctx, `SELECT state::text FROM app_states WHERE app_name = 'counter-app'`).Scan(&app))
	require.JSONEq(t, `{"runs": 4}`, app)
	var temp int
	require.NoError(t, db.QueryRowContext(ctx, `SELECT count(*) FROM events WHERE event_data::text LIKE '%temp:%'`).Scan(&temp))
	require.Zero(t, temp, "no temp: key reaches the database")
}
