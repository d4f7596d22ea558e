package persist

import (
	"encoding/json"
	"errors"

	"github.com/lib/pq"
	lite "modernc.org/sqlite"
)

// IsPermanent tells whether a database error is the data's fault (retrying
// the same rows can never succeed) rather than the database's (down,
// overloaded, a lock timeout, a missing grant: retry with backoff). The
// classes are listed in docs/persistence.md ("What the flusher gives up on").
func IsPermanent(err error) bool {
	if errors.Is(err, ErrInvalidBatch) {
		return true
	}
	var syntax *json.SyntaxError
	if errors.As(err, &syntax) {
		return true
	}
	var pqErr *pq.Error
	if errors.As(err, &pqErr) {
		switch pqErr.Code.Class() {
		case "22", "23", "54": // data exception, integrity constraint violation, program limit exceeded
			return true
		}
		return false
	}
	var liteErr *lite.Error
	if errors.As(err, &liteErr) {
		switch liteErr.Code() & 0xff {
		case 18, 19, 20: // SQLITE_TOOBIG, SQLITE_CONSTRAINT, SQLITE_MISMATCH
			return true
		}
	}
	return false
}
