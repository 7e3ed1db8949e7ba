"""Loading plugins: how providers are found, registered and kept apart.

``discovery`` (entry points, environment switches, hook checks: ``load_providers``),
``registry`` (``ProviderRegistry``: the providers offered and the failures met, and the
per-plugin hook caller), ``boundary`` (the error boundary: every value a plugin hands back
is checked and normalised here), ``builtin`` (core's own plans: eager fp32 and the
native plans) and ``first_party`` (the provider distributions dlopt's project publishes,
so that ``dlopt providers`` names those not installed, with their pip commands). The
contract itself is :mod:`dlopt.contract`.

Provider authors import from :mod:`dlopt.plugin` only, never from here.
"""
