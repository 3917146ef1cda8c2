"""The resource manager: pods, containers and the active policy, their persistent cache, and placement diffs.

Modules: ``resource_manager`` (the relay's hook: construction, decision numbers), over one mixin per job:
``state`` (what it owns, and saving it), ``decisions`` (CRI before/after/failed), ``reconfiguration``, ``resync``,
``controllers_timers``; ``outbox`` (updates no hook call returns), ``cache`` (the JSON cache under
``--relay-dir``), ``placement_diff`` (which other containers a decision changed). The pod and container model it
works on is ``resmgr.model``.
"""
