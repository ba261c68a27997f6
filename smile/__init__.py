"""SMILE: a sharing middleware that keeps SPJ materialized views across PostgreSQL machines
within a staleness SLA (Sankaranarayanan et al., EDBT 2014).

This package root holds nothing but the version; each subpackage says what it is for.
"""

__version__ = "0.1.0"
