"""Cluster-wide audit (BP-34): what each bookie lists, judged against the ledger metadata."""
