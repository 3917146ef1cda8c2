"""The domain model every layer above shares: what a pod and a container ask for, read off CRI messages.

Modules: ``resources`` (ContainerInfo, the resource annotations), ``expressions`` (upstream's label
expression language, used by policies and Adjustment scopes), ``annotation_budget`` (how much of a pod's
annotations we read). It imports only ``config`` and ``topology``, so ``policy/``, ``control/`` and
``manager/`` may all import it without a loop.
"""
