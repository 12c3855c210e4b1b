"""The canary worker: watches receipts of a running canary and promotes or rolls it back
(`controller`); the decisions themselves are pure, in `reach.core.canarybook`."""
