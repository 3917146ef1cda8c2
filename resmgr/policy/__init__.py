"""Resource policies (none, static, topology-aware, balloons) and their registry."""
