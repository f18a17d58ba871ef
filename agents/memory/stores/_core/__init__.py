"""The store's core: the Backend interface, row encoding, the engine every call shares, write batches, reads and terms."""
