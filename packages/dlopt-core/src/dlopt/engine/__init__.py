"""One selection, from a converted workload to a decision.

``select`` (``Selection`` and ``select``: the stages of :mod:`dlopt.pipeline` in order,
the plan cache around them, the report; and ``decision_in_host``: the winner of an
isolated race brought back into the host) and ``decision`` (``OptimizationDecision``: the
served plan behind :class:`~dlopt.serving.served.ServedPlan`, plus its report, bundle and
program). :class:`~dlopt.api.optimizer.InferenceOptimizer` and the isolated worker both
run ``select``.
"""
