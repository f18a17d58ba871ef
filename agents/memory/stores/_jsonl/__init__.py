"""The JSONL backend: one append-only log per session in a directory."""
