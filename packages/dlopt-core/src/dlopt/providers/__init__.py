"""Provider contract, plugin loading and core's built-in plans."""
