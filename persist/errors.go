package persist

import (
	"encoding/json"
	"errors"
	"strings"

	"github.com/lib/pq"
)

// isPermanent tells whether a database error is the data's fault (retrying
// the same entry can never succeed) rather than the database's (down,
// overloaded, a lock timeout: retry with backoff).
func isPermanent(err error) bool {
	if errors.Is(err, ErrInvalidBatch) {
		return true
	}
	var pqErr *pq.Error
	if errors.As(err, &pqErr) {
		switch pqErr.Code.Class() {
		case "22", "23": // data exception, integrity constraint violation
			return true
		}
		return false
	}
	var syntax *json.SyntaxError
	if errors.As(err, &syntax) {
		return true
	}
	msg := err.Error()
	return strings.Contains(msg, "constraint failed") || strings.Contains(msg, "invalid UTF-8")
}
