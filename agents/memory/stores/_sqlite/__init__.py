"""The SQLite backend, the embedded default: the file, its schema, its FTS5 keyword index and scorer."""
