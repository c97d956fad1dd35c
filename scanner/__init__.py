"""bookie-scanner: a data-integrity scanner for Apache BookKeeper bookies and an audit of a whole cluster."""

# The one place the version is set: pyproject.toml reads it when the package is built, and the tool reads it here
# without looking up the installed package's metadata (an import that costs every command tens of milliseconds).
__version__ = "0.1.0"
