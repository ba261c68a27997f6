"""Delta capture: logical replication (pgoutput) from each machine into delta tables ΔR.

Decoding, stream, durable progress and snapshot live in separate modules (issue 3).
"""
