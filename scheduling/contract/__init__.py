"""The JSON contract over the core (docs/scheduling.md): ``scenario`` (``plan`` and
``simulate``, versions 2 and 3), ``pool_scenario`` (version 3's pools), ``fields`` (each
field's reader, a bad value named) and ``simulator`` (the discrete-event replay of a trace
that ``simulate`` runs). Above the live order (:mod:`scheduling.queue`), which it runs."""
