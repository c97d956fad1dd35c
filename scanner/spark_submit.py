"""The file ``spark-submit`` runs for the cluster audit: ``spark-submit ... scanner/spark_submit.py ARGS`` is
``bookie-scanner audit ARGS`` (README, "Cluster audit"). At the top of the house, above the command line it calls."""

from __future__ import annotations

import sys

from scanner.cli import main

if __name__ == "__main__":
    sys.exit(main(["audit", *sys.argv[1:]]))
