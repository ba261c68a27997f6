"""Plans on the machines: the physical form of the global plan, its versions in the catalog,
installing and dropping vertices, advancing them by their incoming edges, and first fills on
Spark — what agents do on their machine, and what tests and benchmarks call directly."""
