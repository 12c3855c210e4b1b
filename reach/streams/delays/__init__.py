"""The delay-tier worker: holds retries on the delay topics until due and forwards them back
(`forwarder`)."""
