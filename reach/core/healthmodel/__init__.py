"""Per-instance health, pure: settings, which receipts count, rolling windows and the rules over them."""
