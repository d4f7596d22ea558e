-- The compacted view's indexes are Postgres's (its 006_compacted_view): SQLite
-- cannot index the function call ids of a JSON array, so a compacted Get of a
-- session Redis lost reads the whole history there (docs/persistence.md, "The
-- compacted view in SQL"). Nothing changes; the version keeps both dialects
-- at the same number.
SELECT 1;
