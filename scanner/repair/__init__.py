"""Getting damaged copies re-replicated: BookKeeper's under-replication marks, filed and followed."""
