"""The stages of one selection, one module each, in the order the engine runs them:
``batches`` (the public API, once) -> ``ground_truth`` (the eager fp32 reference) ->
``plans`` -> ``plan_priors`` (every plan's prior) -> ``schedule`` (the build order and its
cut under the time budget) -> ``probe`` -> ``prepare`` (build, first calls, validation,
build limits; in the schedule's order, with its screenings) -> ``measure`` (the race,
what it is expected to cost, and the screenings' short races) -> ``checks`` (model
unchanged, revalidation, serving check) -> ``constraints`` (measured constraints) ->
``choose`` (selection rules + a fresh validated call) -> :mod:`dlopt.evidence`.

``raced_calls`` is how the race and the schedule's screenings call a plan and check
every call's outputs. ``state`` holds what they share: ``CandidateState`` (one plan's
working record),
``SelectionContext`` (policy, target, clock, event sink) and ``StageError`` (a failure, as
a value). Each stage takes the previous stage's result and records its own on the
candidates; only an unrecoverable state (the reference cannot serve, the user's model was
changed for good) raises. :func:`dlopt.engine.select.select` wires them on one screen;
``race_stages`` runs prepare through constraints for both races (a selection's, and a
cache hit's probe).

This package imports nothing itself: reading a report (which stores ``StageError``)
does not load the stages.
"""
