"""Pure in-memory views over Reach's compacted topics (no I/O); the loops that feed them are the shells."""
