"""`python -m reach` is the `reach` command."""

from reach import cli

cli.main()
