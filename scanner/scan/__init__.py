"""The scan's core: what reads a bookie's index and entry logs and turns what they show into confirmed findings.

Imports go one way, each module using only those above it:

- ``pacing``, ``totals``, ``orphans``, ``ledger_table``, ``allocator``: small parts
- ``record_walk``: one entry log's records walked, verified and matched with the index's locations, in one of two
  forms: ``record_walk_in_c`` (the per-record work in the native code) or ``record_walk_in_python`` (the reference);
  ``record_walk_types``: what goes into a walk and comes out of it, whichever form walks
- ``location_runs``: the index's locations sorted by where they point, served per log to the walker
- ``targeted``: one ledger through its index by random reads (``scan --ledger``, suspects, confirmation)
- ``index_step``, ``log_walks``, ``confirmation``: the steps of a full pass (the index and the cluster; each log's
  walk; every finding read again before it is reported)
- ``full_pass``: a pass over a bookie or one ledger dir (index once, every log once), and chosen logs alone
- ``on_demand``: the ``scan`` command's whole scan, with ledger dirs side by side
"""
