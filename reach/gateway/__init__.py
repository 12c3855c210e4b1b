"""The ingress gateway: signed HTTP for upstream systems in front of the bus (apps, quotas, contracts at the door)."""
