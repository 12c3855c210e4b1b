"""Channels: reach people and systems outside the mesh (webhook, email, SMS) as capabilities served by agents."""
