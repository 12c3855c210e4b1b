"""A2A at the edge of the bus: agent cards, the A2A methods over the gateway, and the bridge to A2A servers."""
