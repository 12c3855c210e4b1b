"""The intent resolver worker: resolves free-text intents to capabilities and hands off what it
cannot (`resolve_loop`)."""
