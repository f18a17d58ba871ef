"""The PostgreSQL backend: its pool, schema, keyword index and pgvector search."""
