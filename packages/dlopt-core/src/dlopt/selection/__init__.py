"""The selection policy: which measured plan is served, and the plain-language reason.

``rules`` (``choose``: the objective, the ``min_speedup`` confidence gate against the native
baseline, the indifference zone and ties to the cheaper plan; ``Costs`` and the lifecycle
arithmetic). It reads typed results only; :mod:`dlopt.pipeline.choose` calls it.
"""
