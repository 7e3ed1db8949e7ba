"""The plugin contract: what a provider implements, receives and hands back.

``provider`` (``ProviderProtocol``, the ``Provider`` base class, ``BuiltPlan``,
``ServingTraits``, ``ProviderContext``, ``PreparedCase``, ``ProviderAvailability``,
``Role``, ``Reload`` and the plugin API version), ``hooks`` (the pluggy hook
specifications a plugin implements), ``records`` (plain records of plugins loaded and
failed), ``calling`` (the calling context: the grad mode plans are judged and served
in, and the kind of tensors a call gets), ``graph_capture`` (a traced or exported
graph that depends on input values, found while the plan traces), ``priors`` (``Prior``
and ``OperatorMix``: what a provider may declare a plan is expected to do before it is
built) and ``probe_cache`` (a provider's probe answered once per environment, kept in the
user cache directory).

Provider authors import from :mod:`dlopt.plugin` only, which re-exports what they need.
"""
