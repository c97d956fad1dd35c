"""BookKeeper's v2 protocol, as a client: the wire format, a pool of connections to bookies, and which bookies the
client may speak to at all (TLS, authentication). The repair (``scanner.repair``) reads and writes copies through it."""
