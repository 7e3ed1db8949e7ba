"""The selection policy: which measured plan is served, and the plain-language reason;
and what each plan is expected to do before it is built.

``rules`` (``choose``: the objective, the ``min_speedup`` confidence gate against the native
baseline, the indifference zone and ties to the cheaper plan; ``Costs`` and the lifecycle
arithmetic), ``throughput`` (the throughput objective: which plan and batch size serve
the most items per second, under an optional latency budget per call) and
``prior_table`` (the prior table shipped with dlopt-core, and where a plan's prior comes
from: the provider, the user's own records, the table). The rules read typed results
only; :mod:`dlopt.pipeline.choose` calls them, :mod:`dlopt.pipeline.schedule` the table.
"""
