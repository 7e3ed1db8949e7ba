"""Serving a decision: what a caller's call goes through before it reaches the plan.

``signature`` (call signatures as keys and text, shape families, held-out batch sizes),
``served`` (``ServedPlan``: routing by signature, eager fallback, gradients, the judged
calling context (:mod:`dlopt.contract.calling`), threads) and ``evidence``
(``ServingEvidence``, the report's ``serving``). See docs/serving.md.
"""
