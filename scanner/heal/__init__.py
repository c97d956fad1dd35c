"""Heal in place: read a damaged entry's good copy from a peer bookie and give it back to this one."""
