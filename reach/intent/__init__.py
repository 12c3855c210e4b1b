"""Intent routing: requests that name what they want in words reach a capability (docs/intent.md)."""
