"""The operator console served by the gateway at /console (docs/console.md)."""
