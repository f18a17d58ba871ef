"""The SQL dialect SQLite and PostgreSQL share, and filters compiled to it."""
