"""The storage layer under every SQL store (the registry, the batch store, quality's
references; the ledgers use its schema and WAL helpers): the dialect seam and its SQLite
and Postgres implementations, versioned schemas, WAL and fsync."""
