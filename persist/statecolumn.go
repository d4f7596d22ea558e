package persist

import (
	"encoding/json"
	"fmt"
)

// stateColumn scans a state column (sessions, app_states, user_states)
// into its keys: a JSON object; NULL, empty or JSON null is {}. Postgres
// returns json and jsonb as bytes, SQLite returns text.
type stateColumn map[string]json.RawMessage

// Scan implements sql.Scanner.
func (m *stateColumn) Scan(v any) error {
	var b []byte
	switch v := v.(type) {
	case nil:
	case []byte:
		b = v
	case string:
		b = []byte(v)
	default:
		return fmt.Errorf("decode state: unsupported type %T", v)
	}
	*m = stateColumn{}
	if len(b) == 0 {
		return nil
	}
	if err := json.Unmarshal(b, (*map[string]json.RawMessage)(m)); err != nil {
		return fmt.Errorf("decode state: %w", err)
	}
	if *m == nil { // the JSON was null
		*m = stateColumn{}
	}
	return nil
}
