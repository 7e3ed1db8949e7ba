"""A worked third-party dlopt provider for tinynpu, the fake NPU SDK shipped beside it.

Read it in this order: ``plugin.py`` (what the entry point loads), ``provider.py`` (the
two plans), then ``tests/`` (the contract suite and a race). The tutorial that walks
through it is docs/writing-a-provider.md in the dlopt repository.
"""

__version__ = "0.3.0"
