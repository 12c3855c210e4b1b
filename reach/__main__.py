"""`python -m reach` is the `reach` command."""

from reach.cli import main

main()
