"""Seed-side Gardener extension controller for cri-resmgr-extension."""
