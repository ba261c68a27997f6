"""The live workload: tweet-rate-driven INSERT/UPDATE/DELETE traffic into the base relations."""
