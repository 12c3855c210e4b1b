"""Runnable example agents (`reach agent run examples.echo_agent:agent`)."""
