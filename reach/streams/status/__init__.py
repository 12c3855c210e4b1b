"""The status table: receipts folded in batches into RocksDB partition stores, changelog `<ns>.status`."""
