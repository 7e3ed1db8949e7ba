"""Serving a decision: what a caller's call goes through before it reaches the plan.

``context`` (the grad mode and tensor kind a call runs in, entering the judged one),
``signature`` (call signatures as keys and text, shape families, held-out batch sizes),
``served`` (``ServedPlan``: routing by signature, eager fallback, gradients, the judged
context, threads). See docs/serving.md.
"""
