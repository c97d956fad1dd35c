"""Where a moved fragment goes: the cluster's racks and bookie groups, and the choice BookKeeper's placement
policies would make (racks.py the topology and the write-set rule, sources.py where racks come from,
isolation.py Pulsar's bookie groups, choice.py the choice, policy.py what a move calls, settings.py the
configuration)."""
