"""Errors any room of the scanner may raise for the command line to report (``scanner.cli`` catches them)."""


class UsageError(Exception):
    """A problem the operator fixes on the command line or in a config file (exit status 2)."""
