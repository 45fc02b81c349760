"""The `k4d` command line. Subcommands of services plug in through the
`k4d.cli` entry-point group: each entry point is `register(subparsers)`."""
