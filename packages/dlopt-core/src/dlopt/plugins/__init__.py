"""The plugin system: how providers are declared, found, registered and kept apart.

``contract`` (``ProviderProtocol``, ``BuiltPlan``, ``ProviderContext``, roles and the
plugin API version), ``hookspecs`` (the pluggy hooks a plugin implements),
``discovery`` (entry points, environment switches, hook checks: ``load_providers``),
``registry`` (``ProviderRegistry``: the providers offered and the failures met, and the
per-plugin hook caller), ``boundary`` (the error boundary: every value a plugin hands back
is checked and normalised here), ``records`` (plain records of plugins loaded and failed)
and ``builtin`` (core's own plans: eager fp32 and the native plans).

Provider authors import from :mod:`dlopt.plugin` only, never from here.
"""
