"""The bookie side of a repair, over BookKeeper's own protocol: read verified copies from peers, write them to a
new bookie (``scanner.repair.rereplicate`` does the ZooKeeper side)."""
