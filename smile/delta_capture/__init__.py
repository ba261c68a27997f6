"""Delta capture: logical replication (pgoutput) from each machine into delta tables ΔR and
shadow copies R̂. Decoding, the transformation into delta rows, the stream, the statements on
the source, the durable progress and the snapshot live in separate modules
(docs/design/capture.md); retention and the advance of R̂ run beside capture, from
`smile.housekeeping`, as this package runs no operator."""
