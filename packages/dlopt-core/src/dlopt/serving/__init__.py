"""Serving a decision: what a caller's call goes through before it reaches the plan.

``signature`` (call signatures as keys and text, shape families, held-out batch sizes),
``served`` (``ServedPlan``: routing by signature, eager fallback, gradients, the judged
calling context (:mod:`dlopt.contract.calling`), threads), ``evidence``
(``ServingEvidence``, the report's ``serving``), and the production guard:
``production`` (``ProductionGuard``: counts, the failure rule, the latency watch),
``shadow`` (eager fp32 reruns of sampled calls in a background thread), ``latency``
(streaming latency histograms), ``health`` (``HealthRecord``, ``decision.health()``) and
``metrics`` (the record as Prometheus metrics); and for servers: ``batching``
(``BatchedDecision``, ``decision.batched()``), ``interface`` (the named tensors a server
exchanges) and ``triton`` (the PyTriton binding). See docs/serving.md and docs/deploy.md.
"""
