// Package cache is adksession's primary store: Redis holds every session,
// its events and state, and the change log of the write-behind. The package
// holds the key layout (keys.go), the client for standalone Redis and Redis
// Cluster, and typed calls of the Lua scripts in package lua; the errors a
// caller of adksession can get are cache/base's. It knows nothing of events beyond
// their JSON. (It is named for its reads: sessions that only the database
// still holds are read back into it. Every write lands here first; the
// database gets it from the change log, or never when there is none.)
//
// It is internal to adksession: its exported names serve the packages of this
// module (service, loader, persist, cmd/adksession) and may change at any
// time. Programs use package service, which re-exports every error of
// cache/base.
package cache
