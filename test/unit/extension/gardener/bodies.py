"""Extension and ManagedResource bodies for the tests of Gardener's generic parts."""

from __future__ import annotations


def ext(annotation=None, last=None, generation=1, observed=1, deleting=False, ext_type="cri-resmgr-extension"):
    meta = {"name": "x", "namespace": "ns", "generation": generation, "annotations": {}}
    if annotation:
        meta["annotations"]["gardener.cloud/operation"] = annotation
    if deleting:
        meta["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    st = {"observedGeneration": observed}
    if last:
        st["lastOperation"] = {"type": last[0], "state": last[1]}
    return {"metadata": meta, "spec": {"type": ext_type}, "status": st}


def mr(applied="True", healthy="True", progressing="False", generation=1, observed=1, refs=("s1",)):
    conds = [{"type": t, "status": s, "message": f"{t} {s}"} for t, s in
             (("ResourcesApplied", applied), ("ResourcesHealthy", healthy), ("ResourcesProgressing", progressing))
             if s is not None]
    return {"metadata": {"generation": generation}, "spec": {"secretRefs": [{"name": r} for r in refs]},
            "status": {"observedGeneration": observed, "conditions": conds}}
