-- Tombstones of adksession_sessions (deleted rows) are purged by the prune
-- (docs/operations.md, "Retention") once they are older than a safety
-- margin. A tombstone carries no time of its own, so the prune stamps the
-- first time it sees one: tombstone_seen, with the incarnation it saw
-- (tombstone_inc), so that a re-created and deleted again id starts over.
ALTER TABLE adksession_sessions ADD COLUMN IF NOT EXISTS tombstone_seen timestamp;
ALTER TABLE adksession_sessions ADD COLUMN IF NOT EXISTS tombstone_inc bigint;
