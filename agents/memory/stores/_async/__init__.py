"""The asyncio stores: the same calls as the sync ones, awaited."""
