"""The `mnote` command line: a client of the daemon socket, plus `init`, `grant` and `daemon`."""
