package persist

import (
	"context"
	"fmt"
	"time"
)

// ClaimNamespace records that namespace opened the database at now, and
// returns the other namespaces that did since now - within, oldest name
// first. One database is meant for one namespace (docs/operations.md,
// "One database, one namespace").
func (s *Store) ClaimNamespace(ctx context.Context, namespace string, now time.Time, within time.Duration) ([]string, error) {
	if _, err := s.db.ExecContext(ctx, `INSERT INTO adksession_namespaces (namespace, last_seen) VALUES ($1, $2)
ON CONFLICT (namespace) DO UPDATE SET last_seen = EXCLUDED.last_seen`, namespace, formatTime(now)); err != nil {
		return nil, fmt.Errorf("record namespace: %w", err)
	}
	rows, err := s.db.QueryContext(ctx, `SELECT namespace FROM adksession_namespaces
WHERE namespace <> $1 AND last_seen >= $2 ORDER BY namespace`, namespace, formatTime(now.Add(-within)))
	if err != nil {
		return nil, fmt.Errorf("read namespaces: %w", err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var ns string
		if err := rows.Scan(&ns); err != nil {
			return nil, fmt.Errorf("read namespaces: %w", err)
		}
		out = append(out, ns)
	}
	return out, rows.Err()
}
