package main

import (
	"fmt"
	"path/filepath"

	"github.com/alicebob/miniredis/v2"
)

// defaultDBFile is the embedded default's SQLite file, in the working directory.
const defaultDBFile = "adksession.db"

// startEmbeddedRedis starts an in-process Redis (miniredis) on addr
// ("127.0.0.1:0" picks a free port). It holds everything in memory: what is
// not flushed to the database is lost when the process ends.
func startEmbeddedRedis(addr string) (*miniredis.Miniredis, string, error) {
	mr := miniredis.NewMiniRedis()
	if err := mr.StartAddr(addr); err != nil {
		return nil, "", fmt.Errorf("start embedded redis on %s: %w", addr, err)
	}
	return mr, "redis://" + mr.Addr() + "/0", nil
}

// sqliteURL is the URL of a SQLite file, made absolute.
func sqliteURL(path string) (string, error) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return "", fmt.Errorf("database file %s: %w", path, err)
	}
	return "sqlite://" + abs, nil
}
